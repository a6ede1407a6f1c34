/* Non-blocking collectives through the standard ABI: many in flight at once, with
 * point-to-point traffic between them, completed in reverse order; a non-dense
 * datatype (packed, unpacked at completion), MPI_IN_PLACE, and the v forms. */
#include "check.h"

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    enum { N = 4096, R = 12 };
    MPI_Request req[R];
    int k = 0;

    int *b = malloc(sizeof(int) * N);
    for (int i = 0; i < N; i++) b[i] = rank == 0 ? i : -1;
    CHECK_OK(MPI_Ibcast(b, N, MPI_INT, 0, MPI_COMM_WORLD, &req[k++]));

    double x = rank + 1, sum = 0, inplace = rank + 1;
    CHECK_OK(MPI_Iallreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req[k++]));
    CHECK_OK(MPI_Iallreduce(MPI_IN_PLACE, &inplace, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req[k++]));

    /* Every other int of a 2p-int buffer gets rank r's value (vector type, packed). */
    MPI_Datatype every_other, resized;
    CHECK_OK(MPI_Type_vector(1, 1, 2, MPI_INT, &every_other));
    CHECK_OK(MPI_Type_create_resized(every_other, 0, 2 * sizeof(int), &resized));
    CHECK_OK(MPI_Type_commit(&resized));
    int *gathered = malloc(sizeof(int) * 2 * p), mine = rank * 3;
    for (int i = 0; i < 2 * p; i++) gathered[i] = -7;
    CHECK_OK(MPI_Iallgather(&mine, 1, MPI_INT, gathered, 1, resized, MPI_COMM_WORLD, &req[k++]));

    int *counts = malloc(sizeof(int) * p), *displs = malloc(sizeof(int) * p);
    for (int r = 0; r < p; r++) { counts[r] = r + 1; displs[r] = r * (r + 1) / 2; }
    int tot = p * (p + 1) / 2, piece[64];
    int *gv = malloc(sizeof(int) * tot);
    for (int i = 0; i <= rank; i++) piece[i] = rank * 100 + i;
    CHECK_OK(MPI_Igatherv(piece, rank + 1, MPI_INT, gv, counts, displs, MPI_INT, p - 1, MPI_COMM_WORLD, &req[k++]));

    int scan_out = -1, ex_out = -1, one = 1;
    CHECK_OK(MPI_Iscan(&one, &scan_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[k++]));
    CHECK_OK(MPI_Iexscan(&one, &ex_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[k++]));

    int *rsb = malloc(sizeof(int) * p), rsb_out = -1;
    for (int r = 0; r < p; r++) rsb[r] = r + rank;
    CHECK_OK(MPI_Ireduce_scatter_block(rsb, &rsb_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req[k++]));

    int *a2a = malloc(sizeof(int) * p), *a2a_out = malloc(sizeof(int) * p);
    for (int r = 0; r < p; r++) a2a[r] = rank * 10 + r;
    CHECK_OK(MPI_Ialltoall(a2a, 1, MPI_INT, a2a_out, 1, MPI_INT, MPI_COMM_WORLD, &req[k++]));

    int red = -1;
    CHECK_OK(MPI_Ireduce(&rank, &red, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD, &req[k++]));
    int sc = -1;
    CHECK_OK(MPI_Iscatter(a2a, 1, MPI_INT, &sc, 1, MPI_INT, 0, MPI_COMM_WORLD, &req[k++]));
    CHECK_OK(MPI_Ibarrier(MPI_COMM_WORLD, &req[k++]));
    CHECK(k == R);

    /* Point-to-point meanwhile: a ring exchange. */
    int token = rank, got = -1;
    CHECK_OK(MPI_Sendrecv(&token, 1, MPI_INT, (rank + 1) % p, 5, &got, 1, MPI_INT, (rank + p - 1) % p, 5,
                          MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(got == (rank + p - 1) % p);

    for (int i = R - 1; i >= 0; i--) CHECK_OK(MPI_Wait(&req[i], MPI_STATUS_IGNORE));

    for (int i = 0; i < N; i++) CHECK(b[i] == i);
    CHECK(sum == p * (p + 1) / 2.0 && inplace == p);
    for (int r = 0; r < p; r++) CHECK(gathered[2 * r] == r * 3 && gathered[2 * r + 1] == -7);
    if (rank == p - 1)
        for (int r = 0; r < p; r++)
            for (int i = 0; i <= r; i++) CHECK(gv[displs[r] + i] == r * 100 + i);
    CHECK(scan_out == rank + 1);
    if (rank > 0) CHECK(ex_out == rank);
    CHECK(rsb_out == p * rank + p * (p - 1) / 2);
    for (int r = 0; r < p; r++) CHECK(a2a_out[r] == r * 10 + rank);
    if (rank == 0) CHECK(red == p - 1);
    CHECK(sc == rank);

    /* Testing until done drives a collective too. */
    int flag = 0;
    CHECK_OK(MPI_Ibarrier(MPI_COMM_WORLD, &req[0]));
    while (!flag) CHECK_OK(MPI_Test(&req[0], &flag, MPI_STATUS_IGNORE));

    CHECK_OK(MPI_Type_free(&every_other));
    CHECK_OK(MPI_Type_free(&resized));
    free(b); free(gathered); free(counts); free(displs); free(gv); free(rsb); free(a2a); free(a2a_out);
    if (rank == 0) printf("nbc OK on %d ranks\n", p);
    CHECK_OK(MPI_Finalize());
    return 0;
}
