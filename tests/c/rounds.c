/* Rounds of a broadcast then a barrier, each rank's time gathered at rank 0, which
 * finalizes last: the others are already in MPI_Finalize when its goodbye and the end
 * of its connections reach them (a job's end that warned of failing lanes, issue 19). */
#include "check.h"

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    char buf[8] = {0};
    double spent = 0;
    for (int i = 0; i < 30; i++) {
        if (rank == 0) buf[0] = (char)i;
        double t0 = MPI_Wtime();
        CHECK_OK(MPI_Bcast(buf, 8, MPI_BYTE, 0, MPI_COMM_WORLD));
        spent += MPI_Wtime() - t0;
        CHECK(buf[0] == (char)i);
        CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    }
    double *all = rank == 0 ? malloc(sizeof(double) * (size_t)p) : NULL;
    CHECK_OK(MPI_Gather(&spent, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    if (rank == 0) {
        for (int r = 0; r < p; r++) CHECK(all[r] >= 0);
        printf("rounds OK on %d ranks\n", p);
        free(all);
    }
    CHECK_OK(MPI_Finalize());
    return 0;
}
