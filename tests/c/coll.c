/* Collectives through the standard ABI on every root: bcast, reduce, allreduce
 * (predefined ops, MINLOC on a pair type, a non-commutative user op), gather, scatter,
 * allgather, alltoall, their MPI_IN_PLACE forms, a derived datatype, Reduce_local. */
#include "check.h"

/* 2x2 matrix product, non-commutative: inout = in * inout. */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int *a = in, *b = inout;
    CHECK(*dt == MPI_INT); /* the handle the program passed */
    for (int k = 0; k < *len / 4; k++, a += 4, b += 4) {
        int r[4] = {a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                    a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3]};
        memcpy(b, r, sizeof r);
    }
}

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    enum { N = 1000 };
    int *v = malloc(sizeof(int) * N * p), *w = malloc(sizeof(int) * N * p);

    for (int root = 0; root < p; root++) {
        for (int i = 0; i < N; i++) v[i] = rank == root ? i * 3 + root : -1;
        CHECK_OK(MPI_Bcast(v, N, MPI_INT, root, MPI_COMM_WORLD));
        for (int i = 0; i < N; i++) CHECK(v[i] == i * 3 + root);

        for (int i = 0; i < N; i++) v[i] = rank + i;
        CHECK_OK(MPI_Reduce(v, w, N, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
        if (rank == root)
            for (int i = 0; i < N; i++) CHECK(w[i] == p * (p - 1) / 2 + p * i);
        /* In place at the root. */
        for (int i = 0; i < N; i++) v[i] = rank + i;
        CHECK_OK(MPI_Reduce(rank == root ? MPI_IN_PLACE : v, v, N, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD));
        if (rank == root)
            for (int i = 0; i < N; i++) CHECK(v[i] == p - 1 + i);

        /* Gather and scatter, one int per rank. */
        int mine = rank * 7 + root;
        CHECK_OK(MPI_Gather(&mine, 1, MPI_INT, w, 1, MPI_INT, root, MPI_COMM_WORLD));
        if (rank == root)
            for (int r = 0; r < p; r++) CHECK(w[r] == r * 7 + root);
        for (int r = 0; r < p; r++) w[r] = r * 11 + root;
        int got = -1;
        CHECK_OK(MPI_Scatter(w, 1, MPI_INT, &got, 1, MPI_INT, root, MPI_COMM_WORLD));
        CHECK(got == rank * 11 + root);
    }

    /* Allreduce: sums, MINLOC on (double, int), a user op in rank order. */
    double x = rank * 1.5, sum = 0;
    CHECK_OK(MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == 1.5 * p * (p - 1) / 2);
    struct { double v; int i; } pair = {(rank - 1) * (rank - 1), rank}, best;
    CHECK_OK(MPI_Allreduce(&pair, &best, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK(p == 1 ? best.v == 1 && best.i == 0 : best.v == 0 && best.i == 1);
    MPI_Op op;
    CHECK_OK(MPI_Op_create(matmul, 0, &op));
    int m[4] = {1, rank + 1, 0, 1}, prod[4]; /* unit upper triangular: product sums */
    int mm[4] = {rank + 1, 1, 1, 0};           /* order matters for these */
    CHECK_OK(MPI_Allreduce(m, prod, 4, MPI_INT, op, MPI_COMM_WORLD));
    CHECK(prod[0] == 1 && prod[1] == p * (p + 1) / 2 && prod[2] == 0 && prod[3] == 1);
    int ref[4] = {1, 0, 0, 1};
    for (int r = p - 1; r >= 0; r--) { /* ref = M_r * ref, so ref = M_0 * M_1 * ... */
        int a[4] = {r + 1, 1, 1, 0}, t[4];
        t[0] = a[0] * ref[0] + a[1] * ref[2]; t[1] = a[0] * ref[1] + a[1] * ref[3];
        t[2] = a[2] * ref[0] + a[3] * ref[2]; t[3] = a[2] * ref[1] + a[3] * ref[3];
        memcpy(ref, t, sizeof t);
    }
    CHECK_OK(MPI_Allreduce(MPI_IN_PLACE, mm, 4, MPI_INT, op, MPI_COMM_WORLD));
    CHECK(memcmp(mm, ref, sizeof ref) == 0);
    int commute = -1;
    CHECK_OK(MPI_Op_commutative(op, &commute));
    CHECK(commute == 0);
    CHECK_OK(MPI_Op_free(&op));
    CHECK(op == MPI_OP_NULL);

    /* Allgather and alltoall, plain and in place. */
    for (int i = 0; i < 2; i++) v[i] = rank * 2 + i;
    CHECK_OK(MPI_Allgather(v, 2, MPI_INT, w, 2, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < 2 * p; i++) CHECK(w[i] == i);
    for (int i = 0; i < 2 * p; i++) w[i] = i / 2 == rank ? i : -1;
    CHECK_OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, w, 2, MPI_INT, MPI_COMM_WORLD));
    for (int i = 0; i < 2 * p; i++) CHECK(w[i] == i);
    for (int r = 0; r < p; r++) v[r] = rank * 100 + r;
    CHECK_OK(MPI_Alltoall(v, 1, MPI_INT, w, 1, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < p; r++) CHECK(w[r] == r * 100 + rank);
    CHECK_OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, w, 1, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < p; r++) CHECK(w[r] == rank * 100 + r);

    /* Bcast of every other int (a vector type); the gaps stay untouched. */
    MPI_Datatype every_other;
    CHECK_OK(MPI_Type_vector(N / 2, 1, 2, MPI_INT, &every_other));
    CHECK_OK(MPI_Type_commit(&every_other));
    for (int i = 0; i < N; i++) v[i] = rank == 0 ? i : -7;
    CHECK_OK(MPI_Bcast(v, 1, every_other, 0, MPI_COMM_WORLD));
    for (int i = 0; i < N; i++) CHECK(v[i] == (i % 2 == 0 || rank == 0 ? i : -7));
    CHECK_OK(MPI_Type_free(&every_other));

    /* Reduce_local. */
    int in[3] = {1, 2, 3}, io[3] = {10, 20, 30};
    CHECK_OK(MPI_Reduce_local(in, io, 3, MPI_INT, MPI_SUM));
    CHECK(io[0] == 11 && io[2] == 33);

    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    free(v);
    free(w);
    if (rank == 0) printf("coll OK on %d ranks\n", p);
    CHECK_OK(MPI_Finalize());
    return 0;
}
