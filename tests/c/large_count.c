/* The MPI-4 large-count (`_c`) functions: counts and displacements as MPI_Count and
 * MPI_Aint. Datatypes and statuses of more than 2^31 elements (no memory needed), the
 * classic forms refusing what does not fit an int, every family of communication call
 * in its `_c` form on real data, and, where the machine has the memory, one message of
 * more than 2^31 elements between two ranks. */
#include "check.h"
#include <stdint.h>

#define BIG ((MPI_Count)1 << 33) /* elements: more than an int counts */

static int rank, size;

static void big_types(void) {
    MPI_Datatype t;
    CHECK_OK(MPI_Type_contiguous_c(BIG, MPI_INT, &t));
    MPI_Count sz, lb, extent;
    CHECK_OK(MPI_Type_size_c(t, &sz));
    CHECK(sz == 4 * BIG);
    int small;
    CHECK_OK(MPI_Type_size(t, &small));
    CHECK(small == MPI_UNDEFINED);
    CHECK_OK(MPI_Type_get_extent_c(t, &lb, &extent));
    CHECK(lb == 0 && extent == 4 * BIG);
    /* The record keeps the count as a large count. */
    MPI_Count ni, na, nc, nd;
    int combiner;
    CHECK_OK(MPI_Type_get_envelope_c(t, &ni, &na, &nc, &nd, &combiner));
    CHECK(ni == 0 && na == 0 && nc == 1 && nd == 1 && combiner == MPI_COMBINER_CONTIGUOUS);
    int ii, ia, id;
    if (on_pontoon()) /* MPI 4.1 §5.1.13: the classic form cannot describe it */
        CHECK(MPI_Type_get_envelope(t, &ii, &ia, &id, &combiner) != MPI_SUCCESS);
    MPI_Count got;
    MPI_Aint aints[1];
    int ints[1];
    MPI_Datatype inner;
    CHECK_OK(MPI_Type_get_contents_c(t, 0, 0, 1, 1, ints, aints, &got, &inner));
    CHECK(got == BIG && inner == MPI_INT);
    MPI_Type_free(&t);
    /* A vector whose stride alone passes 2^31. */
    CHECK_OK(MPI_Type_vector_c(3, 2, BIG, MPI_CHAR, &t));
    CHECK_OK(MPI_Type_get_extent_c(t, &lb, &extent));
    CHECK(extent == 2 * BIG + 2);
    MPI_Type_free(&t);
    /* Sizes of packed forms. */
    MPI_Count psize;
    CHECK_OK(MPI_Pack_size_c(BIG, MPI_INT, MPI_COMM_WORLD, &psize));
    CHECK(psize == 4 * BIG);
    /* MPI-4's class for a result too large for its argument (MPICH 5 gives MPI_UNDEFINED). */
    int rc = MPI_Pack_size((int)(BIG >> 4), MPI_INT, MPI_COMM_WORLD, &small), cls;
    MPI_Error_class(rc, &cls);
    if (on_pontoon())
        CHECK(cls == MPI_ERR_VALUE_TOO_LARGE);
    CHECK_OK(MPI_Pack_external_size_c("external32", BIG, MPI_LONG, &psize));
    CHECK(psize == 4 * BIG);
    /* A status of more than 2^31 elements. */
    MPI_Status st;
    CHECK_OK(MPI_Status_set_elements_c(&st, MPI_INT, BIG));
    CHECK_OK(MPI_Get_count_c(&st, MPI_INT, &got));
    CHECK(got == BIG);
    CHECK_OK(MPI_Get_count(&st, MPI_INT, &small));
    CHECK(small == MPI_UNDEFINED);
    CHECK_OK(MPI_Get_elements_c(&st, MPI_CHAR, &got));
    CHECK(got == 4 * BIG);
}

static void point_to_point(void) {
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Count n = 5;
    int out[5], in[5];
    for (int i = 0; i < 5; i++)
        out[i] = rank * 10 + i, in[i] = -1;
    CHECK_OK(MPI_Sendrecv_c(out, n, MPI_INT, next, 1, in, n, MPI_INT, prev, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(in[4] == prev * 10 + 4);
    MPI_Request r[2];
    CHECK_OK(MPI_Irecv_c(in, n, MPI_INT, prev, 2, MPI_COMM_WORLD, &r[0]));
    CHECK_OK(MPI_Isend_c(out, n, MPI_INT, next, 2, MPI_COMM_WORLD, &r[1]));
    MPI_Status st[2];
    CHECK_OK(MPI_Waitall(2, r, st));
    MPI_Count got;
    CHECK_OK(MPI_Get_count_c(&st[0], MPI_INT, &got));
    CHECK(got == 5 && in[0] == prev * 10);
    /* Sendrecv_replace_c and a persistent pair. */
    int x = rank;
    CHECK_OK(MPI_Sendrecv_replace_c(&x, 1, MPI_INT, next, 3, prev, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(x == prev);
    CHECK_OK(MPI_Recv_init_c(in, n, MPI_INT, prev, 4, MPI_COMM_WORLD, &r[0]));
    CHECK_OK(MPI_Send_init_c(out, n, MPI_INT, next, 4, MPI_COMM_WORLD, &r[1]));
    for (int round = 0; round < 2; round++) {
        in[2] = -1;
        CHECK_OK(MPI_Startall(2, r));
        CHECK_OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK(in[2] == prev * 10 + 2);
    }
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);
    /* Buffered mode with a buffer attached through the large form. */
    MPI_Count bsize = 1 << 16;
    void *buf = malloc(bsize);
    CHECK_OK(MPI_Buffer_attach_c(buf, bsize));
    CHECK_OK(MPI_Bsend_c(out, n, MPI_INT, next, 5, MPI_COMM_WORLD));
    CHECK_OK(MPI_Recv_c(in, n, MPI_INT, prev, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    void *back;
    MPI_Count back_size;
    CHECK_OK(MPI_Buffer_detach_c(&back, &back_size));
    CHECK(back == buf && back_size == bsize);
    free(buf);
    /* A matched probe, received by the large form. */
    CHECK_OK(MPI_Issend_c(out, n, MPI_INT, next, 6, MPI_COMM_WORLD, &r[1]));
    MPI_Message msg;
    CHECK_OK(MPI_Mprobe(prev, 6, MPI_COMM_WORLD, &msg, &st[0]));
    CHECK_OK(MPI_Mrecv_c(in, n, MPI_INT, &msg, MPI_STATUS_IGNORE));
    CHECK_OK(MPI_Wait(&r[1], MPI_STATUS_IGNORE));
    CHECK(in[3] == prev * 10 + 3);
}

static void user_sum(void *a, void *b, MPI_Count *len, MPI_Datatype *dt) {
    (void)dt;
    for (MPI_Count i = 0; i < *len; i++)
        ((int64_t *)b)[i] += ((int64_t *)a)[i];
}

static void collectives(void) {
    MPI_Count *counts = malloc(size * sizeof(MPI_Count));
    MPI_Aint *displs = malloc(size * sizeof(MPI_Aint)), *bdispls = malloc(size * sizeof(MPI_Aint));
    MPI_Datatype *types = malloc(size * sizeof(MPI_Datatype));
    int *all = malloc(size * 8 * sizeof(int)), mine[8];
    MPI_Count total = 0;
    for (int r = 0; r < size; r++) {
        counts[r] = r % 3 + 1; /* rank r contributes r % 3 + 1 ints */
        displs[r] = total + r; /* a gap of r before each block */
        total += counts[r];
    }
    for (int i = 0; i < 8; i++)
        mine[i] = rank * 100 + i;
    /* Allgatherv_c: MPI_Count counts, MPI_Aint displacements. */
    for (int i = 0; i < size * 8; i++)
        all[i] = -1;
    CHECK_OK(MPI_Allgatherv_c(mine, counts[rank], MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < counts[r]; i++)
            CHECK(all[displs[r] + i] == r * 100 + i);
    /* Its non-blocking form. */
    MPI_Request req;
    for (int i = 0; i < size * 8; i++)
        all[i] = -1;
    CHECK_OK(MPI_Iallgatherv_c(mine, counts[rank], MPI_INT, all, counts, displs, MPI_INT, MPI_COMM_WORLD, &req));
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(all[displs[size - 1]] == (size - 1) * 100);
    /* Bcast_c, Allreduce_c with a user operation of the large form, Reduce_local_c. */
    int64_t v[3] = {rank, 1, -rank}, s[3];
    MPI_Op op;
    CHECK_OK(MPI_Op_create_c(user_sum, 1, &op));
    CHECK_OK(MPI_Allreduce_c(v, s, 3, MPI_INT64_T, op, MPI_COMM_WORLD));
    CHECK(s[0] == (int64_t)size * (size - 1) / 2 && s[1] == size && s[2] == -s[0]);
    CHECK_OK(MPI_Reduce_local_c(v, s, 3, MPI_INT64_T, op));
    CHECK(s[1] == size + 1);
    CHECK_OK(MPI_Ireduce_c(v, s, 3, MPI_INT64_T, op, 0, MPI_COMM_WORLD, &req));
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    if (rank == 0)
        CHECK(s[1] == size);
    MPI_Op_free(&op);
    int b[2] = {rank, rank};
    CHECK_OK(MPI_Bcast_c(b, 2, MPI_INT, size - 1, MPI_COMM_WORLD));
    CHECK(b[1] == size - 1);
    /* Alltoallv_c and its persistent form: r % 3 + 1 ints to every rank. */
    int *sendv = malloc(size * 8 * sizeof(int)), *recvv = malloc(size * 8 * sizeof(int));
    MPI_Count *scounts = malloc(size * sizeof(MPI_Count)), *rcounts = malloc(size * sizeof(MPI_Count));
    MPI_Aint *sd = malloc(size * sizeof(MPI_Aint)), *rd = malloc(size * sizeof(MPI_Aint));
    for (int r = 0; r < size; r++) {
        scounts[r] = rank % 3 + 1, sd[r] = 4 * r, rcounts[r] = r % 3 + 1, rd[r] = 4 * r;
        for (int i = 0; i < 4; i++)
            sendv[4 * r + i] = rank * 1000 + r * 10 + i;
    }
    MPI_Request pers;
    CHECK_OK(MPI_Alltoallv_init_c(sendv, scounts, sd, MPI_INT, recvv, rcounts, rd, MPI_INT, MPI_COMM_WORLD,
                                  MPI_INFO_NULL, &pers));
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < size * 4; i++)
            recvv[i] = -1;
        if (round < 2) {
            CHECK_OK(MPI_Start(&pers));
            CHECK_OK(MPI_Wait(&pers, MPI_STATUS_IGNORE));
        } else {
            CHECK_OK(MPI_Alltoallv_c(sendv, scounts, sd, MPI_INT, recvv, rcounts, rd, MPI_INT, MPI_COMM_WORLD));
        }
        for (int r = 0; r < size; r++)
            for (int i = 0; i < rcounts[r]; i++)
                CHECK(recvv[4 * r + i] == r * 1000 + rank * 10 + i);
    }
    MPI_Request_free(&pers);
    /* Alltoallw_c: MPI_Aint byte displacements. */
    for (int r = 0; r < size; r++) {
        scounts[r] = 1, rcounts[r] = 1, types[r] = MPI_INT;
        sd[r] = 16 * r, bdispls[r] = (MPI_Aint)sizeof(int) * (size - 1 - r);
    }
    CHECK_OK(MPI_Alltoallw_c(sendv, scounts, sd, types, recvv, rcounts, bdispls, types, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        CHECK(recvv[size - 1 - r] == r * 1000 + rank * 10);
    /* Reduce_scatter_c: rank r gets r % 3 + 1 sums. */
    int *rs_in = malloc(total * sizeof(int)), rs_out[4];
    for (int i = 0; i < total; i++)
        rs_in[i] = i + rank;
    CHECK_OK(MPI_Reduce_scatter_c(rs_in, rs_out, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    MPI_Count first = 0;
    for (int r = 0; r < rank; r++)
        first += counts[r];
    for (int i = 0; i < counts[rank]; i++)
        CHECK(rs_out[i] == size * (int)(first + i) + size * (size - 1) / 2);
    /* Gatherv_c at the last rank, Scatterv_c from it. */
    int root = size - 1;
    for (int i = 0; i < size * 8; i++)
        all[i] = -1;
    CHECK_OK(MPI_Gatherv_c(mine, counts[rank], MPI_INT, all, counts, displs, MPI_INT, root, MPI_COMM_WORLD));
    if (rank == root)
        CHECK(all[displs[1 % size]] == (1 % size) * 100);
    int got[4] = {-1, -1, -1, -1};
    CHECK_OK(MPI_Scatterv_c(all, counts, displs, MPI_INT, got, counts[rank], MPI_INT, root, MPI_COMM_WORLD));
    CHECK(got[0] == rank * 100 && got[counts[rank] - 1] == rank * 100 + counts[rank] - 1);
    /* A neighbourhood exchange on a ring. */
    MPI_Comm ring;
    int periods = 1;
    CHECK_OK(MPI_Cart_create(MPI_COMM_WORLD, 1, &size, &periods, 0, &ring));
    int nb_out[2] = {rank, rank}, nb_in[2] = {-1, -1};
    CHECK_OK(MPI_Neighbor_alltoall_c(nb_out, 1, MPI_INT, nb_in, 1, MPI_INT, ring));
    CHECK(nb_in[0] == (rank + size - 1) % size && nb_in[1] == (rank + 1) % size);
    MPI_Comm_free(&ring);
    free(counts), free(displs), free(bdispls), free(types), free(all), free(sendv), free(recvv);
    free(scounts), free(rcounts), free(sd), free(rd), free(rs_in);
}

static void packing(void) {
    int v[4] = {1, 2, 3, 4}, w[4] = {0};
    char buf[64];
    MPI_Count pos = 0;
    CHECK_OK(MPI_Pack_c(v, 4, MPI_INT, buf, sizeof buf, &pos, MPI_COMM_WORLD));
    CHECK(pos == 16);
    pos = 0;
    CHECK_OK(MPI_Unpack_c(buf, sizeof buf, &pos, w, 4, MPI_INT, MPI_COMM_WORLD));
    CHECK(pos == 16 && w[3] == 4);
    pos = 0;
    CHECK_OK(MPI_Pack_external_c("external32", v, 4, MPI_INT, buf, sizeof buf, &pos));
    CHECK(pos == 16 && buf[3] == 1 && buf[0] == 0);
}

/* More than 2^31 chars from each rank to the next, if the machine has the memory. */
static void huge_message(void) {
    MPI_Count n = ((MPI_Count)1 << 31) + 24;
    long avail_kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %ld kB", &avail_kb) == 1)
            break;
    if (f)
        fclose(f);
    /* Two buffers per rank and room for the transport. */
    int enough = avail_kb / 1024 / 1024 >= 3 * size + 2, all_enough;
    MPI_Allreduce(&enough, &all_enough, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_enough) {
        if (rank == 0)
            printf("large_count: skipped the message of 2^31 + 24 chars: %ld GiB available\n", avail_kb >> 20);
        return;
    }
    char *out = malloc(n), *in = malloc(n);
    CHECK(out && in);
    for (MPI_Count i = 0; i < n; i += 4096)
        out[i] = (char)(i >> 12) + rank, in[i] = 0;
    out[n - 1] = (char)(rank + 7);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Status st;
    CHECK_OK(MPI_Sendrecv_c(out, n, MPI_CHAR, next, 9, in, n, MPI_CHAR, prev, 9, MPI_COMM_WORLD, &st));
    MPI_Count got;
    CHECK_OK(MPI_Get_count_c(&st, MPI_CHAR, &got));
    CHECK(got == n && in[n - 1] == (char)(prev + 7) && in[n - 4096 * 3 - 24] == (char)(((n - 4096 * 3 - 24) >> 12) + prev));
    free(out);
    free(in);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    big_types();
    point_to_point();
    collectives();
    packing();
    if (argc > 1)
        huge_message();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("large_count OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
