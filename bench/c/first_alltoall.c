/* The first collective of a job whose every rank talks to every other: MPI_Alltoall of
 * one int right after MPI_Init, checked. bench/scale.sh times whole jobs of it (start-up,
 * wire-up of every pair, the alltoall, finalize) as the number of ranks grows, and the
 * time to the end of the first collective (the latest "done" a rank prints).
 * Prints "alltoall N ranks ok SECONDS" on rank 0 (the alltoall alone), and on every rank
 * "done T", T the wall clock (seconds since the epoch) when its alltoall returned. */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    int *out = malloc(n * sizeof(int)), *in = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++)
        out[i] = rank * 100000 + i;
    double t = MPI_Wtime();
    MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, MPI_COMM_WORLD);
    t = MPI_Wtime() - t;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int i = 0; i < n; i++)
        if (in[i] != i * 100000 + rank) {
            fprintf(stderr, "rank %d: wrong value from rank %d\n", rank, i);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    printf("done %.6f\n", now.tv_sec + now.tv_nsec * 1e-9);
    if (rank == 0)
        printf("alltoall %d ranks ok %.3f\n", n, t);
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
