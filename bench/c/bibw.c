/* Bidirectional bandwidth between ranks 0 and 1 in plain standard MPI (any mpicc), the
 * method of osu_bibw: for each size, both ranks post a window of non-blocking receives,
 * then a window of non-blocking sends to each other, and wait for all of them; after the
 * warm-up windows the timed ones give bytes moved in both directions per second.
 * Prints one line per size:
 *     SIZE_BYTES BANDWIDTH_MB_S CPU_S_PER_GB
 * the last: the user + system CPU seconds of both ranks during the timed windows
 * (getrusage), per GB moved (both directions). The first line names the MPI library.
 * Usage: bibw [MAX_BYTES [ITERS [WINDOW]]]  (defaults 4194304, 100 and 64; fewer
 * iterations above 64 KiB, as OSU does). Extra ranks wait at the barriers. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* User + system CPU seconds of this process so far. */
static double cpu_seconds(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 4L << 20;
    int iters_small = argc > 2 ? atoi(argv[2]) : 100;
    int window = argc > 3 ? atoi(argv[3]) : 64;
    if (size < 2 || max < 1 || iters_small < 1 || window < 1) {
        if (rank == 0) fprintf(stderr, "bibw needs 2 ranks and positive arguments\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* One buffer per direction, shared by the window as OSU does: the bytes are not checked. */
    char *sbuf = malloc((size_t)max), *rbuf = malloc((size_t)max);
    MPI_Request *reqs = malloc(2 * (size_t)window * sizeof(MPI_Request));
    MPI_Status *stats = malloc(2 * (size_t)window * sizeof(MPI_Status));
    memset(sbuf, 's', (size_t)max);
    memset(rbuf, 'r', (size_t)max);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0) printf("# library: %s\n# bytes bibw_MB_s cpu_s_per_GB (window %d)\n", lib, window);
    int peer = rank == 0 ? 1 : 0;
    for (long n = 1; n <= max; n *= 2) {
        int iters = n > 65536 ? iters_small / 5 + 1 : iters_small;
        int warmup = iters / 10 + 1;
        double t0 = 0, cpu0 = cpu_seconds();
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warmup + iters && rank < 2; i++) {
            if (i == warmup) {
                t0 = MPI_Wtime();
                cpu0 = cpu_seconds();
            }
            for (int w = 0; w < window; w++)
                MPI_Irecv(rbuf, (int)n, MPI_BYTE, peer, 10, MPI_COMM_WORLD, &reqs[w]);
            for (int w = 0; w < window; w++)
                MPI_Isend(sbuf, (int)n, MPI_BYTE, peer, 10, MPI_COMM_WORLD, &reqs[window + w]);
            MPI_Waitall(2 * window, reqs, stats);
        }
        double t = MPI_Wtime() - t0;
        double cpu = rank < 2 ? cpu_seconds() - cpu0 : 0, cpu_all = 0;
        MPI_Reduce(&cpu, &cpu_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        double bytes = 2.0 * n * window * iters;
        if (rank == 0) printf("%ld %.1f %.3f\n", n, bytes / t / 1e6, cpu_all / (bytes / 1e9));
    }
    free(reqs);
    free(stats);
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return 0;
}
