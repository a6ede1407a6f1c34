/* MPI_Allreduce latency in plain standard MPI (any mpicc), after osu_allreduce: for each
 * size (MPI_DOUBLE, MPI_SUM), warm-up calls, then timed back-to-back calls (osu_allreduce
 * puts an untimed barrier between calls; an allreduce holds the ranks together by itself,
 * so it changes little here); each rank's average time per call, averaged over the ranks
 * (OSU's "Avg Latency"). Prints one
 * line per size, and checks every result (a wrong sum aborts the job):
 *     SIZE_BYTES AVG_LATENCY_US
 * The first line names the MPI library.
 * Usage: allreduce [MAX_BYTES [ITERS]]  (defaults 4194304 and 1000; fewer iterations
 * above 8 KiB, as OSU does). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 4L << 20;
    int iters_small = argc > 2 ? atoi(argv[2]) : 1000;
    if (max < 8 || iters_small < 1) {
        if (rank == 0) fprintf(stderr, "allreduce needs MAX_BYTES >= 8 and ITERS >= 1\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t count_max = (size_t)max / sizeof(double);
    double *in = malloc(count_max * sizeof(double)), *out = malloc(count_max * sizeof(double));
    for (size_t i = 0; i < count_max; i++) in[i] = rank + 1.0;
    /* 1 + 2 + ... + size, exact in binary floating point for any job size used here. */
    double expect = size * (size + 1.0) / 2;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0) printf("# library: %s\n# bytes avg_latency_us (%d ranks)\n", lib, size);
    for (size_t count = 1; count <= count_max; count *= 2) {
        size_t bytes = count * sizeof(double);
        int iters = bytes > 8192 ? iters_small / 10 + 1 : iters_small;
        int warmup = iters / 10 + 1;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warmup + iters; i++) {
            if (i == warmup) t0 = MPI_Wtime();
            MPI_Allreduce(in, out, (int)count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        }
        double mine = (MPI_Wtime() - t0) * 1e6 / iters, sum = 0;
        for (size_t i = 0; i < count; i++) {
            if (out[i] != expect) {
                fprintf(stderr, "rank %d: allreduce of %zu doubles: element %zu is %g, not %g\n", rank,
                        count, i, out[i], expect);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%zu %.2f\n", bytes, sum / size);
    }
    free(in);
    free(out);
    MPI_Finalize();
    return 0;
}
