/* Collective latency in plain standard MPI (any mpicc): MPI_Allreduce (MPI_DOUBLE, MPI_SUM)
 * and MPI_Bcast (MPI_BYTE, root 0) at 8 B, 64 KiB and 4 MiB. OSU's iteration counts, but
 * timed back to back (no barrier between calls, unlike osu_bcast and osu_allreduce: the
 * bcast's figure is how fast calls follow each other, which on one host is within a few
 * microseconds of one call); each rank's average per call, and the slowest rank's
 * average is printed (rank 0), one line per operation and size:
 *     allreduce 8 12.34
 * Usage: coll [ITERS]  (iterations at 8 B, 1000 by default; a tenth of them, at least 10, for
 * 64 KiB and 4 MiB, with a fifth as warm-up, as osu_allreduce and osu_bcast do). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double run(int op, size_t bytes, int iters, void *a, void *b) {
    int warmup = iters / 5 + 1;
    double t0 = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < warmup + iters; i++) {
        if (i == warmup) {
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
        }
        if (op == 0)
            MPI_Allreduce(a, b, (int)(bytes / sizeof(double)), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else
            MPI_Bcast(a, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    double mine = (MPI_Wtime() - t0) * 1e6 / iters, slowest = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int iters = argc > 1 ? atoi(argv[1]) : 1000;
    const size_t sizes[] = {8, 65536, 4194304};
    const char *names[] = {"allreduce", "bcast"};
    void *a = malloc(4194304), *b = malloc(4194304);
    memset(a, 1, 4194304);
    memset(b, 0, 4194304);
    for (int op = 0; op < 2; op++) {
        for (int s = 0; s < 3; s++) {
            int n = sizes[s] >= 65536 ? (iters / 10 > 10 ? iters / 10 : 10) : iters;
            double us = run(op, sizes[s], n, a, b);
            if (rank == 0)
                printf("%s %zu %.3f\n", names[op], sizes[s], us);
        }
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
