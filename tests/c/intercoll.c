/* Every collective MPI defines on intercommunicators, between MPI_COMM_WORLD's even and
 * odd ranks: blocking, then all non-blocking ones in flight at once completed together,
 * then persistent ones started twice. Roots in either group (MPI_ROOT, MPI_PROC_NULL,
 * remote rank), different block sizes at the two sides, v and w forms with gaps. */
#include "check.h"

enum mode { BLOCKING, NONBLOCKING, PERSISTENT };

static int wrank, odd, lrank, lsize, rsize;

/* The world rank of remote rank j. */
static int rw(int j) { return 2 * j + !odd; }

/* The root argument at this rank for a root at local rank `at` of the group `in_odd`. */
static int root_at(int in_odd, int at) {
    if (odd == in_odd)
        return lrank == at ? MPI_ROOT : MPI_PROC_NULL;
    return at;
}

/* Reduce_scatter's split of T elements over a group of n: as even as it gets. */
#define T 7
static int share(int i, int n) { return T / n + (i < T % n); }
static int before(int i, int n) {
    int s = 0;
    for (int k = 0; k < i; k++)
        s += share(k, n);
    return s;
}

typedef struct {
    int bc[3], red_in[2], red_out[2], ar_out[2];
    int g_in[2], *g_out, *s_in, s_out[2];
    int ag_in[2], *ag_out, *a2a_in, *a2a_out, *w_out;
    int *gv_in, *gv_out, *gv_counts, *gv_displs;
    int *sv_in, *sv_out, *sv_counts, *sv_displs;
    int *agv_in, *agv_out, *agv_counts, *agv_displs;
    int *av_in, *av_out, *av_scounts, *av_sdispls, *av_rcounts, *av_rdispls;
    int *w_counts, *w_displs;
    MPI_Datatype *w_types;
    int rs_in[T], rs_out[T], *rs_counts, rsb_in[6], rsb_out[6];
} bufs;

static int *ints(int n) { return calloc(n > 0 ? n : 1, sizeof(int)); }

static void fill(bufs *b) {
    b->bc[0] = b->bc[1] = b->bc[2] = -1;
    if (!odd && lrank == 0)
        b->bc[0] = 7, b->bc[1] = 8, b->bc[2] = 9;
    b->red_in[0] = wrank, b->red_in[1] = wrank * wrank;
    b->red_out[0] = b->red_out[1] = b->ar_out[0] = b->ar_out[1] = -1;
    b->g_in[0] = wrank, b->g_in[1] = wrank + 100;
    for (int j = 0; j < 2 * rsize; j++)
        b->g_out[j] = -1, b->s_in[j] = (j % 2 ? 2000 : 1000) + j / 2;
    b->s_out[0] = b->s_out[1] = -1;
    b->ag_in[0] = wrank, b->ag_in[1] = -wrank;
    for (int j = 0; j < 2 * rsize; j++)
        b->ag_out[j] = -1;
    for (int j = 0; j < rsize; j++)
        b->a2a_in[j] = wrank * 100 + j, b->a2a_out[j] = -1, b->w_out[j] = -1;
    /* gatherv: remote j sends j + 1 ints, placed backwards with a gap of one */
    int at = 1;
    for (int j = rsize - 1; j >= 0; j--)
        b->gv_counts[j] = j + 1, b->gv_displs[j] = at, at += j + 2;
    for (int i = 0; i < at; i++)
        b->gv_out[i] = -1;
    for (int i = 0; i <= lrank; i++)
        b->gv_in[i] = wrank;
    /* scatterv: remote j gets j + 1 ints of 500 + j */
    at = 0;
    for (int j = 0; j < rsize; j++) {
        b->sv_counts[j] = j + 1, b->sv_displs[j] = at;
        for (int i = 0; i <= j; i++)
            b->sv_in[at + i] = 500 + j;
        at += j + 2;
    }
    for (int i = 0; i <= lrank; i++)
        b->sv_out[i] = -1;
    /* allgatherv: each sends lrank % 3 + 1 ints */
    at = 0;
    for (int j = 0; j < rsize; j++)
        b->agv_counts[j] = j % 3 + 1, b->agv_displs[j] = at, at += j % 3 + 2;
    for (int i = 0; i < at; i++)
        b->agv_out[i] = -1;
    for (int i = 0; i < lrank % 3 + 1; i++)
        b->agv_in[i] = wrank;
    /* alltoallv: (lrank + j) % 3 ints each way; alltoallw: alltoall's data, byte displs */
    int sat = 0, rat = 0;
    for (int j = 0; j < rsize; j++) {
        int n = (lrank + j) % 3;
        b->av_scounts[j] = n, b->av_sdispls[j] = sat;
        for (int i = 0; i < n; i++)
            b->av_in[sat + i] = wrank * 1000 + j;
        sat += n + 1;
        b->av_rcounts[j] = n, b->av_rdispls[j] = rat, rat += n + 1;
        b->w_counts[j] = 1, b->w_displs[j] = (rsize - 1 - j) * (int)sizeof(int), b->w_types[j] = MPI_INT;
    }
    for (int i = 0; i < rat; i++)
        b->av_out[i] = -1;
    for (int k = 0; k < T; k++)
        b->rs_in[k] = wrank * 10 + k, b->rs_out[k] = -1;
    for (int i = 0; i < lsize; i++)
        b->rs_counts[i] = share(i, lsize);
    for (int k = 0; k < 6; k++)
        b->rsb_in[k] = wrank + k, b->rsb_out[k] = -1;
}

/* Runs every collective on `inter` in `mode`; returns how many requests it made. */
static int run(bufs *b, MPI_Comm inter, enum mode mode, MPI_Request *r) {
    int n = 0;
    int agsend = odd ? 2 : 1, agrecv = odd ? 1 : 2, rsb = 6 / lsize;
#define RUN(call, icall, init)                                 \
    do {                                                       \
        if (mode == BLOCKING)                                  \
            CHECK_OK(call);                                    \
        else if (mode == NONBLOCKING)                          \
            CHECK_OK(icall);                                   \
        else                                                   \
            CHECK_OK(init);                                    \
        if (mode != BLOCKING)                                  \
            n++;                                               \
    } while (0)
#define A1(...) __VA_ARGS__, inter
#define NB &r[n]
#define PI MPI_INFO_NULL, &r[n]
    RUN(MPI_Barrier(inter), MPI_Ibarrier(inter, NB), MPI_Barrier_init(inter, PI));
    int br = root_at(0, 0);
    RUN(MPI_Bcast(A1(b->bc, 3, MPI_INT, br)), MPI_Ibcast(A1(b->bc, 3, MPI_INT, br), NB),
        MPI_Bcast_init(A1(b->bc, 3, MPI_INT, br), PI));
    int rr = root_at(1, (odd ? lsize : rsize) - 1); /* the last odd rank */
    RUN(MPI_Reduce(A1(b->red_in, b->red_out, 2, MPI_INT, MPI_SUM, rr)),
        MPI_Ireduce(A1(b->red_in, b->red_out, 2, MPI_INT, MPI_SUM, rr), NB),
        MPI_Reduce_init(A1(b->red_in, b->red_out, 2, MPI_INT, MPI_SUM, rr), PI));
    RUN(MPI_Allreduce(A1(b->red_in, b->ar_out, 2, MPI_INT, MPI_MAX)),
        MPI_Iallreduce(A1(b->red_in, b->ar_out, 2, MPI_INT, MPI_MAX), NB),
        MPI_Allreduce_init(A1(b->red_in, b->ar_out, 2, MPI_INT, MPI_MAX), PI));
    int gr = root_at(0, 0), sr = root_at(1, 0);
    RUN(MPI_Gather(A1(b->g_in, 2, MPI_INT, b->g_out, 2, MPI_INT, gr)),
        MPI_Igather(A1(b->g_in, 2, MPI_INT, b->g_out, 2, MPI_INT, gr), NB),
        MPI_Gather_init(A1(b->g_in, 2, MPI_INT, b->g_out, 2, MPI_INT, gr), PI));
    RUN(MPI_Scatter(A1(b->s_in, 2, MPI_INT, b->s_out, 2, MPI_INT, sr)),
        MPI_Iscatter(A1(b->s_in, 2, MPI_INT, b->s_out, 2, MPI_INT, sr), NB),
        MPI_Scatter_init(A1(b->s_in, 2, MPI_INT, b->s_out, 2, MPI_INT, sr), PI));
    RUN(MPI_Allgather(A1(b->ag_in, agsend, MPI_INT, b->ag_out, agrecv, MPI_INT)),
        MPI_Iallgather(A1(b->ag_in, agsend, MPI_INT, b->ag_out, agrecv, MPI_INT), NB),
        MPI_Allgather_init(A1(b->ag_in, agsend, MPI_INT, b->ag_out, agrecv, MPI_INT), PI));
    RUN(MPI_Alltoall(A1(b->a2a_in, 1, MPI_INT, b->a2a_out, 1, MPI_INT)),
        MPI_Ialltoall(A1(b->a2a_in, 1, MPI_INT, b->a2a_out, 1, MPI_INT), NB),
        MPI_Alltoall_init(A1(b->a2a_in, 1, MPI_INT, b->a2a_out, 1, MPI_INT), PI));
    RUN(MPI_Gatherv(A1(b->gv_in, lrank + 1, MPI_INT, b->gv_out, b->gv_counts, b->gv_displs, MPI_INT, gr)),
        MPI_Igatherv(A1(b->gv_in, lrank + 1, MPI_INT, b->gv_out, b->gv_counts, b->gv_displs, MPI_INT, gr), NB),
        MPI_Gatherv_init(A1(b->gv_in, lrank + 1, MPI_INT, b->gv_out, b->gv_counts, b->gv_displs, MPI_INT, gr), PI));
    RUN(MPI_Scatterv(A1(b->sv_in, b->sv_counts, b->sv_displs, MPI_INT, b->sv_out, lrank + 1, MPI_INT, sr)),
        MPI_Iscatterv(A1(b->sv_in, b->sv_counts, b->sv_displs, MPI_INT, b->sv_out, lrank + 1, MPI_INT, sr), NB),
        MPI_Scatterv_init(A1(b->sv_in, b->sv_counts, b->sv_displs, MPI_INT, b->sv_out, lrank + 1, MPI_INT, sr), PI));
    RUN(MPI_Allgatherv(A1(b->agv_in, lrank % 3 + 1, MPI_INT, b->agv_out, b->agv_counts, b->agv_displs, MPI_INT)),
        MPI_Iallgatherv(A1(b->agv_in, lrank % 3 + 1, MPI_INT, b->agv_out, b->agv_counts, b->agv_displs, MPI_INT), NB),
        MPI_Allgatherv_init(A1(b->agv_in, lrank % 3 + 1, MPI_INT, b->agv_out, b->agv_counts, b->agv_displs, MPI_INT), PI));
    RUN(MPI_Alltoallv(A1(b->av_in, b->av_scounts, b->av_sdispls, MPI_INT, b->av_out, b->av_rcounts, b->av_rdispls, MPI_INT)),
        MPI_Ialltoallv(A1(b->av_in, b->av_scounts, b->av_sdispls, MPI_INT, b->av_out, b->av_rcounts, b->av_rdispls, MPI_INT), NB),
        MPI_Alltoallv_init(A1(b->av_in, b->av_scounts, b->av_sdispls, MPI_INT, b->av_out, b->av_rcounts, b->av_rdispls, MPI_INT), PI));
    /* alltoallw: block j sent from position j, received into position rsize - 1 - j */
    int *straight = ints(rsize);
    for (int j = 0; j < rsize; j++)
        straight[j] = j * (int)sizeof(int);
    RUN(MPI_Alltoallw(A1(b->a2a_in, b->w_counts, straight, b->w_types, b->w_out, b->w_counts, b->w_displs, b->w_types)),
        MPI_Ialltoallw(A1(b->a2a_in, b->w_counts, straight, b->w_types, b->w_out, b->w_counts, b->w_displs, b->w_types), NB),
        MPI_Alltoallw_init(A1(b->a2a_in, b->w_counts, straight, b->w_types, b->w_out, b->w_counts, b->w_displs, b->w_types), PI));
    RUN(MPI_Reduce_scatter(A1(b->rs_in, b->rs_out, b->rs_counts, MPI_INT, MPI_SUM)),
        MPI_Ireduce_scatter(A1(b->rs_in, b->rs_out, b->rs_counts, MPI_INT, MPI_SUM), NB),
        MPI_Reduce_scatter_init(A1(b->rs_in, b->rs_out, b->rs_counts, MPI_INT, MPI_SUM), PI));
    RUN(MPI_Reduce_scatter_block(A1(b->rsb_in, b->rsb_out, rsb, MPI_INT, MPI_SUM)),
        MPI_Ireduce_scatter_block(A1(b->rsb_in, b->rsb_out, rsb, MPI_INT, MPI_SUM), NB),
        MPI_Reduce_scatter_block_init(A1(b->rsb_in, b->rsb_out, rsb, MPI_INT, MPI_SUM), PI));
    /* Persistent requests keep the displacement array's address: it stays until freed. */
    if (mode != PERSISTENT)
        free(straight);
    return n;
}

static void check(bufs *b) {
    if (odd)
        CHECK(b->bc[0] == 7 && b->bc[1] == 8 && b->bc[2] == 9);
    else if (lrank != 0)
        CHECK(b->bc[0] == -1);
    int s0 = 0, s1 = 0, m0 = -1, m1 = -1;
    for (int j = 0; j < rsize; j++) {
        s0 += rw(j), s1 += rw(j) * rw(j);
        m0 = rw(j) > m0 ? rw(j) : m0, m1 = rw(j) * rw(j) > m1 ? rw(j) * rw(j) : m1;
    }
    if (odd && lrank == lsize - 1)
        CHECK(b->red_out[0] == s0 && b->red_out[1] == s1);
    else
        CHECK(b->red_out[0] == -1);
    CHECK(b->ar_out[0] == m0 && b->ar_out[1] == m1);
    for (int j = 0; j < rsize; j++) {
        if (!odd && lrank == 0)
            CHECK(b->g_out[2 * j] == rw(j) && b->g_out[2 * j + 1] == rw(j) + 100);
        if (odd) /* evens send one int each, odds two */
            CHECK(b->ag_out[j] == rw(j));
        else
            CHECK(b->ag_out[2 * j] == rw(j) && b->ag_out[2 * j + 1] == -rw(j));
        CHECK(b->a2a_out[j] == rw(j) * 100 + lrank);
        CHECK(b->w_out[rsize - 1 - j] == rw(j) * 100 + lrank);
        for (int i = 0; i < b->gv_counts[j] && !odd && lrank == 0; i++)
            CHECK(b->gv_out[b->gv_displs[j] + i] == rw(j));
        for (int i = 0; i < b->agv_counts[j]; i++)
            CHECK(b->agv_out[b->agv_displs[j] + i] == rw(j));
        for (int i = 0; i < b->av_rcounts[j]; i++)
            CHECK(b->av_out[b->av_rdispls[j] + i] == rw(j) * 1000 + lrank);
    }
    if (!odd && lrank == 0)
        CHECK(b->gv_out[0] == -1); /* the gap before the last block */
    if (!odd) {
        CHECK(b->s_out[0] == 1000 + lrank && b->s_out[1] == 2000 + lrank);
        for (int i = 0; i <= lrank; i++)
            CHECK(b->sv_out[i] == 500 + lrank);
    } else {
        CHECK(b->s_out[0] == -1 && b->sv_out[0] == -1);
    }
    int first = before(lrank, lsize);
    for (int k = 0; k < share(lrank, lsize); k++) {
        int want = 0;
        for (int j = 0; j < rsize; j++)
            want += rw(j) * 10 + first + k;
        CHECK(b->rs_out[k] == want);
    }
    int rsb = 6 / lsize;
    for (int k = 0; k < rsb; k++) {
        int want = 0;
        for (int j = 0; j < rsize; j++)
            want += rw(j) + lrank * rsb + k;
        CHECK(b->rsb_out[k] == want);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int wsize;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (wsize < 2 || wsize > 7) { /* 6 / lsize must divide evenly */
        if (wrank == 0)
            printf("intercoll OK on %d ranks\n", wsize);
        MPI_Finalize();
        return 0;
    }
    odd = wrank % 2, lrank = wrank / 2;
    MPI_Comm local, inter;
    CHECK_OK(MPI_Comm_split(MPI_COMM_WORLD, odd, wrank, &local));
    MPI_Comm_size(local, &lsize);
    CHECK_OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, odd ? 0 : 1, 7, &inter));
    MPI_Comm_remote_size(inter, &rsize);
    if (6 % lsize != 0 || 6 % rsize != 0) {
        if (wrank == 0)
            printf("intercoll OK on %d ranks\n", wsize);
        MPI_Finalize();
        return 0;
    }
    bufs b;
    int big = 2 * (rsize + 1) * (rsize + 2) + 8;
    b.g_out = ints(2 * rsize), b.s_in = ints(2 * rsize), b.ag_out = ints(2 * rsize);
    b.a2a_in = ints(rsize), b.a2a_out = ints(rsize), b.w_out = ints(rsize);
    b.gv_in = ints(lsize + 1), b.gv_out = ints(big), b.gv_counts = ints(rsize), b.gv_displs = ints(rsize);
    b.sv_in = ints(big), b.sv_out = ints(lsize + 1), b.sv_counts = ints(rsize), b.sv_displs = ints(rsize);
    b.agv_in = ints(4), b.agv_out = ints(big), b.agv_counts = ints(rsize), b.agv_displs = ints(rsize);
    b.av_in = ints(big), b.av_out = ints(big);
    b.av_scounts = ints(rsize), b.av_sdispls = ints(rsize), b.av_rcounts = ints(rsize), b.av_rdispls = ints(rsize);
    b.w_counts = ints(rsize), b.w_displs = ints(rsize);
    b.w_types = malloc(rsize * sizeof(MPI_Datatype));
    b.rs_counts = ints(lsize);
    MPI_Request reqs[32];

    fill(&b);
    run(&b, inter, BLOCKING, reqs);
    check(&b);

    fill(&b);
    int n = run(&b, inter, NONBLOCKING, reqs);
    /* Completed last first, all at once. */
    for (int i = 0; i < n / 2; i++) {
        MPI_Request t = reqs[i];
        reqs[i] = reqs[n - 1 - i], reqs[n - 1 - i] = t;
    }
    CHECK_OK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
    check(&b);

    n = run(&b, inter, PERSISTENT, reqs);
    for (int round = 0; round < 2; round++) {
        fill(&b);
        CHECK_OK(MPI_Startall(n, reqs));
        CHECK_OK(MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE));
        check(&b);
    }
    for (int i = 0; i < n; i++)
        CHECK_OK(MPI_Request_free(&reqs[i]));

    /* Not defined on intercommunicators: an error, not a hang. */
    int one = 1, got;
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    CHECK(MPI_Scan(&one, &got, 1, MPI_INT, MPI_SUM, inter) != MPI_SUCCESS);
    if (on_pontoon())
        CHECK(MPI_Allreduce(MPI_IN_PLACE, &got, 1, MPI_INT, MPI_SUM, inter) != MPI_SUCCESS);

    CHECK_OK(MPI_Comm_free(&inter));
    CHECK_OK(MPI_Comm_free(&local));
    if (wrank == 0)
        printf("intercoll OK on %d ranks\n", wsize);
    MPI_Finalize();
    return 0;
}
