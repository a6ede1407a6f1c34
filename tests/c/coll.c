/* Collectives through the standard ABI on every root: bcast, reduce, allreduce
 * (predefined ops, MINLOC on a pair type, a non-commutative user op), gather, scatter,
 * allgather, alltoall, their MPI_IN_PLACE forms, a derived datatype, Reduce_local; the
 * v and w forms with uneven counts and gaps; reduce_scatter(_block), scan, exscan. */
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
        /* In place at the root: its receive side is not there at all (MPI_DATATYPE_NULL). */
        got = -1;
        if (rank == root)
            CHECK_OK(MPI_Scatter(w, 1, MPI_INT, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, MPI_COMM_WORLD));
        else
            CHECK_OK(MPI_Scatter(NULL, 0, MPI_DATATYPE_NULL, &got, 1, MPI_INT, root, MPI_COMM_WORLD));
        CHECK(rank == root ? w[root] == root * 11 + root : got == rank * 11 + root);
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

    /* Allreduce and bcast of predefined datatypes and operations (pontoon's immediate
     * paths): in place, zero elements, more than the node's collective area holds, and
     * the errors those paths leave to the general one. */
    double d[3] = {rank, 2.0 * rank, -1.0 * rank};
    CHECK_OK(MPI_Allreduce(MPI_IN_PLACE, d, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    CHECK(d[0] == p - 1 && d[1] == 2.0 * (p - 1) && d[2] == 0);
    CHECK_OK(MPI_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK_OK(MPI_Bcast(NULL, 0, MPI_INT, 0, MPI_COMM_WORLD));
    enum { BIG = 100000 }; /* 800 KB of doubles: beyond the node's collective area */
    double *many = malloc(sizeof(double) * BIG), *manysum = malloc(sizeof(double) * BIG);
    for (int i = 0; i < BIG; i++) many[i] = rank + i;
    CHECK_OK(MPI_Allreduce(many, manysum, BIG, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    for (int i = 0; i < BIG; i++) CHECK(manysum[i] == p * (p - 1) / 2.0 + (double)p * i);
    for (int i = 0; i < BIG; i++) many[i] = rank == p - 1 ? i : -1;
    CHECK_OK(MPI_Bcast(many, BIG, MPI_DOUBLE, p - 1, MPI_COMM_WORLD));
    for (int i = 0; i < BIG; i++) CHECK(many[i] == i);
    free(many);
    free(manysum);
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    unsigned char byte = 1, bytesum = 0;
    int cls, err = MPI_Allreduce(&byte, &bytesum, 1, MPI_BYTE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Error_class(err, &cls);
    CHECK(err != MPI_SUCCESS); /* SUM is not defined for MPI_BYTE */
    err = MPI_Bcast(&byte, 1, MPI_BYTE, p, MPI_COMM_WORLD);
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_ROOT);
    err = MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_NULL);
    MPI_Error_class(err, &cls);
    CHECK(cls == MPI_ERR_COMM);
    if (rank != 0) { /* MPI_IN_PLACE is the root's: refused before anything moves */
        int one = 1, disp = 0;
        MPI_Request req;
        err = MPI_Gatherv(MPI_IN_PLACE, 1, MPI_INT, w, &one, &disp, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Error_class(err, &cls);
        CHECK(cls == MPI_ERR_BUFFER);
        err = MPI_Igatherv(MPI_IN_PLACE, 1, MPI_INT, w, &one, &disp, MPI_INT, 0, MPI_COMM_WORLD, &req);
        MPI_Error_class(err, &cls);
        CHECK(cls == MPI_ERR_BUFFER);
    }
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));

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

    /* Gatherv / scatterv / allgatherv: rank r has r+1 ints; block r starts at
     * r*(r+1)/2 + r in the receive buffer, leaving one gap before each block. */
    int *counts = malloc(sizeof(int) * p), *displs = malloc(sizeof(int) * p);
    int span = 0;
    for (int r = 0; r < p; r++) {
        counts[r] = r + 1;
        displs[r] = r * (r + 1) / 2 + r;
        span = displs[r] + counts[r];
    }
    int *big = malloc(sizeof(int) * (span + 1)), mine[64];
    for (int k = 0; k <= rank; k++) mine[k] = rank * 10 + k;
    for (int root = 0; root < p; root++) {
        for (int i = 0; i < span; i++) big[i] = -1;
        CHECK_OK(MPI_Gatherv(mine, rank + 1, MPI_INT, big, counts, displs, MPI_INT, root, MPI_COMM_WORLD));
        if (rank == root)
            for (int r = 0; r < p; r++) {
                for (int k = 0; k < counts[r]; k++) CHECK(big[displs[r] + k] == r * 10 + k);
                if (displs[r] > 0) CHECK(big[displs[r] - 1] == -1);
            }
        int part[64] = {0};
        CHECK_OK(MPI_Scatterv(big, counts, displs, MPI_INT, part, rank + 1, MPI_INT, root, MPI_COMM_WORLD));
        for (int k = 0; k <= rank; k++) CHECK(part[k] == rank * 10 + k);
    }
    for (int i = 0; i < span; i++) big[i] = -1;
    CHECK_OK(MPI_Allgatherv(mine, rank + 1, MPI_INT, big, counts, displs, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < p; r++)
        for (int k = 0; k < counts[r]; k++) CHECK(big[displs[r] + k] == r * 10 + k);
    for (int i = 0; i < span; i++) big[i] = i >= displs[rank] && i < displs[rank] + counts[rank] ? rank * 10 + i - displs[rank] : -1;
    CHECK_OK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, big, counts, displs, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < p; r++)
        for (int k = 0; k < counts[r]; k++) CHECK(big[displs[r] + k] == r * 10 + k);

    /* Alltoallv: rank r sends j+1 ints to rank j and receives r+1 from each. */
    int *sc = malloc(sizeof(int) * p), *sd = malloc(sizeof(int) * p);
    int *rc2 = malloc(sizeof(int) * p), *rd = malloc(sizeof(int) * p);
    int *sb = malloc(sizeof(int) * p * p), *rb = malloc(sizeof(int) * p * p);
    for (int j = 0, at = 0; j < p; j++) {
        sc[j] = j + 1;
        sd[j] = at;
        for (int k = 0; k <= j; k++) sb[at + k] = rank * 1000 + j * 10 + k;
        at += j + 1;
        rc2[j] = rank + 1;
        rd[j] = j * (rank + 1);
    }
    CHECK_OK(MPI_Alltoallv(sb, sc, sd, MPI_INT, rb, rc2, rd, MPI_INT, MPI_COMM_WORLD));
    for (int j = 0; j < p; j++)
        for (int k = 0; k <= rank; k++) CHECK(rb[rd[j] + k] == j * 1000 + rank * 10 + k);
    /* Alltoallw: the same exchange, byte displacements, a datatype per peer. */
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * p);
    for (int j = 0; j < p; j++) {
        types[j] = MPI_INT;
        sd[j] *= (int)sizeof(int);
        rd[j] *= (int)sizeof(int);
    }
    for (int i = 0; i < p * (rank + 1); i++) rb[i] = -1;
    CHECK_OK(MPI_Alltoallw(sb, sc, sd, types, rb, rc2, rd, types, MPI_COMM_WORLD));
    for (int j = 0; j < p; j++)
        for (int k = 0; k <= rank; k++) CHECK(rb[rd[j] / (int)sizeof(int) + k] == j * 1000 + rank * 10 + k);

    /* Reduce_scatter_block and reduce_scatter (rank r gets r+1 elements). */
    int *vec = malloc(sizeof(int) * (p * p + 2 * p + 1)), res[64];
    for (int i = 0; i < 2 * p; i++) vec[i] = rank + i;
    CHECK_OK(MPI_Reduce_scatter_block(vec, res, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int k = 0; k < 2; k++) CHECK(res[k] == p * (p - 1) / 2 + p * (2 * rank + k));
    int total = p * (p + 1) / 2, before = rank * (rank + 1) / 2;
    for (int i = 0; i < total; i++) vec[i] = rank * i;
    CHECK_OK(MPI_Reduce_scatter(vec, res, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int k = 0; k <= rank; k++) CHECK(res[k] == p * (p - 1) / 2 * (before + k));
    for (int i = 0; i < total; i++) vec[i] = rank * i;
    CHECK_OK(MPI_Reduce_scatter(MPI_IN_PLACE, vec, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    for (int k = 0; k <= rank; k++) CHECK(vec[k] == p * (p - 1) / 2 * (before + k));

    /* Scan and exscan of the ranks; exscan leaves rank 0's buffer alone. */
    int s_in = rank + 1, s_out = -5;
    CHECK_OK(MPI_Scan(&s_in, &s_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(s_out == (rank + 1) * (rank + 2) / 2);
    s_out = -5;
    CHECK_OK(MPI_Exscan(&s_in, &s_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(s_out == (rank == 0 ? -5 : rank * (rank + 1) / 2));
    s_out = rank + 1;
    CHECK_OK(MPI_Scan(MPI_IN_PLACE, &s_out, 1, MPI_INT, MPI_PROD, MPI_COMM_WORLD));
    int fact = 1;
    for (int r = 1; r <= rank + 1; r++) fact *= r;
    CHECK(s_out == fact);
    free(counts); free(displs); free(big); free(sc); free(sd); free(rc2); free(rd);
    free(sb); free(rb); free(types); free(vec);

    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    free(v);
    free(w);
    if (rank == 0) printf("coll OK on %d ranks\n", p);
    CHECK_OK(MPI_Finalize());
    return 0;
}
