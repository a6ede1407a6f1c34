/* Many non-blocking collectives of mixed kinds outstanding at once, on several duplicates
 * of MPI_COMM_WORLD, each with its own buffers and argument arrays, completed in a
 * random order through MPI_Wait, Waitany, Waitsome, Waitall, Test, Testany, Testsome and
 * Testall; every result is checked against what the blocking collective gives. An
 * external suite found MPI_Iallgatherv wrong in such a mix (10 ints per rank at
 * displacement i*10) on 1, 4, 5 and 10 ranks while the same call alone was right. */
#include "check.h"

#define OPS 20
#define DUPS 4
#define K 10
#define TOTAL 600

enum kind {
    BARRIER, BCAST, ALLREDUCE, ALLGATHER, ALLGATHERV, ALLTOALL, GATHERV, SCATTER, REDUCE, SCAN,
    EXSCAN, REDUCE_SCATTER, ALLTOALLW, P2P, GATHER_FREED_TYPE, REDUCE_FREED_OP, KINDS
};

struct op {
    enum kind kind;
    MPI_Comm comm;
    int *send, *recv, *expect;
    int *counts, *displs;
    MPI_Datatype *types;
    int nexpect, ntotal;
    int root;
    MPI_Request req;
    int done;
    int index;
};

static unsigned lcg(unsigned *s) { return *s = *s * 1103515245u + 12345u, (*s >> 16) & 0x7fff; }

static int value(int op, int rank, int i) { return op * 100000 + rank * 1000 + i; }

static void int_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

static void start(struct op *o, int index, int rank, int size) {
    int total = K * size;
    o->send = calloc(total, sizeof(int));
    o->recv = malloc(total * sizeof(int));
    for (int i = 0; i < total; i++)
        o->recv[i] = (int)0xdeadbeef;
    o->expect = calloc(total, sizeof(int));
    o->counts = calloc(size, sizeof(int));
    o->displs = calloc(size, sizeof(int));
    o->types = NULL;
    o->ntotal = total;
    o->root = index % size;
    for (int i = 0; i < total; i++)
        o->send[i] = value(index, rank, i);
    switch (o->kind) {
    case BARRIER:
        o->nexpect = 0;
        CHECK_OK(MPI_Ibarrier(o->comm, &o->req));
        break;
    case BCAST:
        o->nexpect = K;
        if (rank == o->root)
            memcpy(o->recv, o->send, K * sizeof(int));
        for (int i = 0; i < K; i++)
            o->expect[i] = value(index, o->root, i);
        CHECK_OK(MPI_Ibcast(o->recv, K, MPI_INT, o->root, o->comm, &o->req));
        break;
    case ALLREDUCE:
        o->nexpect = K;
        for (int i = 0; i < K; i++)
            for (int r = 0; r < size; r++)
                o->expect[i] += value(index, r, i);
        CHECK_OK(MPI_Iallreduce(o->send, o->recv, K, MPI_INT, MPI_SUM, o->comm, &o->req));
        break;
    case ALLGATHER:
        o->nexpect = total;
        for (int r = 0; r < size; r++)
            for (int i = 0; i < K; i++)
                o->expect[r * K + i] = value(index, r, i);
        CHECK_OK(MPI_Iallgather(o->send, K, MPI_INT, o->recv, K, MPI_INT, o->comm, &o->req));
        break;
    case ALLGATHERV:
        o->nexpect = total;
        for (int r = 0; r < size; r++) {
            o->counts[r] = K;
            o->displs[r] = r * K;
            for (int i = 0; i < K; i++)
                o->expect[r * K + i] = value(index, r, i);
        }
        CHECK_OK(MPI_Iallgatherv(o->send, K, MPI_INT, o->recv, o->counts, o->displs, MPI_INT, o->comm,
                                 &o->req));
        break;
    case ALLTOALL:
        o->nexpect = total;
        for (int r = 0; r < size; r++)
            for (int i = 0; i < K; i++)
                o->expect[r * K + i] = value(index, r, rank * K + i);
        CHECK_OK(MPI_Ialltoall(o->send, K, MPI_INT, o->recv, K, MPI_INT, o->comm, &o->req));
        break;
    case GATHERV: /* reversed order of the pieces, to catch displacements ignored */
        o->nexpect = rank == o->root ? total : 0;
        for (int r = 0; r < size; r++) {
            o->counts[r] = K;
            o->displs[r] = (size - 1 - r) * K;
            for (int i = 0; i < K; i++)
                o->expect[(size - 1 - r) * K + i] = value(index, r, i);
        }
        CHECK_OK(MPI_Igatherv(o->send, K, MPI_INT, o->recv, o->counts, o->displs, MPI_INT, o->root,
                              o->comm, &o->req));
        break;
    case SCATTER:
        o->nexpect = K;
        for (int i = 0; i < K; i++)
            o->expect[i] = value(index, o->root, rank * K + i);
        CHECK_OK(MPI_Iscatter(o->send, K, MPI_INT, o->recv, K, MPI_INT, o->root, o->comm, &o->req));
        break;
    case REDUCE:
        o->nexpect = rank == o->root ? K : 0;
        for (int i = 0; i < K; i++)
            for (int r = 0; r < size; r++)
                o->expect[i] = (r == 0 || value(index, r, i) > o->expect[i]) ? value(index, r, i) : o->expect[i];
        CHECK_OK(MPI_Ireduce(o->send, o->recv, K, MPI_INT, MPI_MAX, o->root, o->comm, &o->req));
        break;
    case SCAN:
        o->nexpect = K;
        for (int i = 0; i < K; i++)
            for (int r = 0; r <= rank; r++)
                o->expect[i] += value(index, r, i);
        CHECK_OK(MPI_Iscan(o->send, o->recv, K, MPI_INT, MPI_SUM, o->comm, &o->req));
        break;
    case EXSCAN:
        o->nexpect = rank == 0 ? 0 : K; /* undefined on rank 0 */
        for (int i = 0; i < K; i++)
            for (int r = 0; r < rank; r++)
                o->expect[i] += value(index, r, i);
        CHECK_OK(MPI_Iexscan(o->send, o->recv, K, MPI_INT, MPI_SUM, o->comm, &o->req));
        break;
    case REDUCE_SCATTER:
        o->nexpect = K;
        for (int r = 0; r < size; r++)
            o->counts[r] = K;
        for (int i = 0; i < K; i++)
            for (int r = 0; r < size; r++)
                o->expect[i] += value(index, r, rank * K + i);
        CHECK_OK(MPI_Ireduce_scatter(o->send, o->recv, o->counts, MPI_INT, MPI_SUM, o->comm, &o->req));
        break;
    case ALLTOALLW: /* byte displacements, a type per peer */
        o->nexpect = total;
        o->types = calloc(size, sizeof(MPI_Datatype));
        for (int r = 0; r < size; r++) {
            o->counts[r] = K;
            o->displs[r] = r * K * (int)sizeof(int);
            o->types[r] = MPI_INT;
            for (int i = 0; i < K; i++)
                o->expect[r * K + i] = value(index, r, rank * K + i);
        }
        CHECK_OK(MPI_Ialltoallw(o->send, o->counts, o->displs, o->types, o->recv, o->counts, o->displs,
                                o->types, o->comm, &o->req));
        break;
    case P2P: /* point-to-point in the mix: a ring */
        o->nexpect = K;
        for (int i = 0; i < K; i++)
            o->expect[i] = value(index, (rank + size - 1) % size, i);
        /* Two requests would not fit the slot: the send is synchronous-free (buffered
         * by the eager protocol) and completed here; the receive is the slot's. */
        {
            MPI_Request send;
            CHECK_OK(MPI_Irecv(o->recv, K, MPI_INT, (rank + size - 1) % size, 5, o->comm, &o->req));
            CHECK_OK(MPI_Isend(o->send, K, MPI_INT, (rank + 1) % size, 5, o->comm, &send));
            CHECK_OK(MPI_Wait(&send, MPI_STATUS_IGNORE));
        }
        break;
    case GATHER_FREED_TYPE: { /* the datatype is freed before the operation completes */
        MPI_Datatype type;
        CHECK_OK(MPI_Type_dup(MPI_INT, &type));
        o->nexpect = rank == o->root ? total : 0;
        for (int r = 0; r < size; r++)
            for (int i = 0; i < K; i++)
                o->expect[r * K + i] = value(index, r, i);
        CHECK_OK(MPI_Igather(o->send, K, MPI_INT, o->recv, K, type, o->root, o->comm, &o->req));
        CHECK_OK(MPI_Type_free(&type));
        break;
    }
    case REDUCE_FREED_OP: { /* the user's op is freed before the operation completes */
        MPI_Op op;
        CHECK_OK(MPI_Op_create(int_sum, 1, &op));
        o->nexpect = rank == o->root ? K : 0;
        for (int i = 0; i < K; i++)
            for (int r = 0; r < size; r++)
                o->expect[i] += value(index, r, i);
        CHECK_OK(MPI_Ireduce(o->send, o->recv, K, MPI_INT, op, o->root, o->comm, &o->req));
        CHECK_OK(MPI_Op_free(&op));
        break;
    }
    default:
        CHECK(0);
    }
}

static void check(struct op *o, int index, int rank) {
    for (int i = 0; i < o->nexpect; i++)
        if (o->recv[i] != o->expect[i]) {
            fprintf(stderr, "rank %d: op %d (kind %d) element %d: got %d, expected %d\n", rank, index,
                    o->kind, i, o->recv[i], o->expect[i]);
            CHECK(o->recv[i] == o->expect[i]);
        }
    /* Nothing beyond the result is touched (rank 0's exscan result is undefined). */
    for (int i = o->nexpect; i < o->ntotal && !(o->kind == EXSCAN && o->nexpect == 0); i++)
        if (o->recv[i] != (int)0xdeadbeef) {
            fprintf(stderr, "rank %d: op %d (kind %d) wrote element %d beyond its result\n", rank, index,
                    o->kind, i);
            CHECK(o->recv[i] == (int)0xdeadbeef);
        }
    free(o->send);
    free(o->recv);
    free(o->expect);
    free(o->counts);
    free(o->displs);
    free(o->types);
}

/* Completes `slot`'s operation, checks it, and posts the next one there (if any are left). */
static void completed(struct op *ops, MPI_Request *reqs, int slot, int rank, int size, MPI_Comm *dups,
                      unsigned *shared, int *posted, int *left) {
    CHECK(!ops[slot].done && reqs[slot] == MPI_REQUEST_NULL);
    ops[slot].done = 1;
    check(&ops[slot], ops[slot].index, rank);
    (*left)--;
    if (*posted < TOTAL) {
        /* The k-th operation is the same on every rank (kind, communicator); only the slot
         * it lands in differs, as each rank completes in an order of its own. */
        ops[slot].kind = (enum kind)(*posted % 3 == 0 ? ALLGATHERV : (int)(lcg(shared) % KINDS));
        ops[slot].comm = dups[lcg(shared) % DUPS];
        ops[slot].done = 0;
        ops[slot].index = *posted;
        start(&ops[slot], *posted, rank, size);
        reqs[slot] = ops[slot].req;
        (*posted)++;
        (*left)++;
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm dups[DUPS];
    for (int d = 0; d < DUPS; d++)
        CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &dups[d]));
    unsigned shared = 17, own = 1000 * (rank + 1);
    struct op ops[OPS];
    MPI_Request reqs[OPS];
    int posted = 0, left = 0;
    for (int i = 0; i < OPS; i++) {
        ops[i].kind = (enum kind)(lcg(&shared) % KINDS);
        ops[i].comm = dups[lcg(&shared) % DUPS];
        ops[i].done = 0;
        ops[i].index = posted;
        start(&ops[i], posted++, rank, size);
        reqs[i] = ops[i].req;
        left++;
    }
    while (left > 0) {
        int index, flag, n, idx[OPS];
        int done[OPS], ndone = 0;
        switch (lcg(&own) % 8) {
        case 0: /* MPI_Wait on a random one still pending */
            do
                index = (int)(lcg(&own) % OPS);
            while (ops[index].done);
            CHECK_OK(MPI_Wait(&reqs[index], MPI_STATUS_IGNORE));
            done[ndone++] = index;
            break;
        case 1:
            CHECK_OK(MPI_Waitany(OPS, reqs, &index, MPI_STATUS_IGNORE));
            if (index != MPI_UNDEFINED)
                done[ndone++] = index;
            break;
        case 2:
            CHECK_OK(MPI_Waitsome(OPS, reqs, &n, idx, MPI_STATUSES_IGNORE));
            for (int j = 0; n != MPI_UNDEFINED && j < n; j++)
                done[ndone++] = idx[j];
            break;
        case 3:
            do
                index = (int)(lcg(&own) % OPS);
            while (ops[index].done);
            CHECK_OK(MPI_Test(&reqs[index], &flag, MPI_STATUS_IGNORE));
            if (flag)
                done[ndone++] = index;
            break;
        case 4:
            CHECK_OK(MPI_Testany(OPS, reqs, &index, &flag, MPI_STATUS_IGNORE));
            if (flag && index != MPI_UNDEFINED)
                done[ndone++] = index;
            break;
        case 5:
            CHECK_OK(MPI_Testsome(OPS, reqs, &n, idx, MPI_STATUSES_IGNORE));
            for (int j = 0; n != MPI_UNDEFINED && j < n; j++)
                done[ndone++] = idx[j];
            break;
        case 6:
            CHECK_OK(MPI_Testall(OPS, reqs, &flag, MPI_STATUSES_IGNORE));
            for (int j = 0; flag && j < OPS; j++)
                if (!ops[j].done)
                    done[ndone++] = j;
            break;
        default:
            if (left <= OPS / 2) {
                CHECK_OK(MPI_Waitall(OPS, reqs, MPI_STATUSES_IGNORE));
                for (int j = 0; j < OPS; j++)
                    if (!ops[j].done)
                        done[ndone++] = j;
            }
        }
        for (int j = 0; j < ndone; j++)
            completed(ops, reqs, done[j], rank, size, dups, &shared, &posted, &left);
    }
    for (int d = 0; d < DUPS; d++)
        CHECK_OK(MPI_Comm_free(&dups[d]));
    if (rank == 0)
        printf("nbc_mix OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
