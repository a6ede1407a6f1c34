/* One-way latency and bandwidth between ranks 0 and 1 in plain standard MPI (any
 * mpicc), the method of osu_latency: for each size, warm-up round trips, then timed
 * ones; one-way time is half the round trip. Prints one line per size:
 *     SIZE_BYTES LATENCY_US BANDWIDTH_MB_S
 * The first line names the MPI library.
 * Usage: pingpong [MAX_BYTES [ITERS]]  (defaults 4194304 and 10000; fewer iterations
 * above 8 KiB, as OSU does). Extra ranks wait at the barriers. With PINGPONG_THREADS=multiple
 * in the environment it asks for MPI_THREAD_MULTIPLE (one thread still does everything: what
 * that level costs a single-threaded program) and says what it got. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *threads = getenv("PINGPONG_THREADS");
    int provided = MPI_THREAD_SINGLE;
    if (threads && strcmp(threads, "multiple") == 0) {
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
        MPI_Init(&argc, &argv);
        MPI_Query_thread(&provided);
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 4L << 20;
    int iters_small = argc > 2 ? atoi(argv[2]) : 10000;
    if (size < 2) {
        if (rank == 0) fprintf(stderr, "pingpong needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = malloc(max > 0 ? (size_t)max : 1);
    memset(buf, 'p', max > 0 ? (size_t)max : 1);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0) {
        printf("# library: %s\n# thread level: %s\n# bytes latency_us bandwidth_MB_s\n", lib,
               provided == MPI_THREAD_MULTIPLE ? "multiple" : provided == MPI_THREAD_SERIALIZED ? "serialized"
               : provided == MPI_THREAD_FUNNELED ? "funneled" : "single");
    }
    for (long n = 0; n <= max; n = n ? n * 2 : 1) {
        int iters = n > 8192 ? iters_small / 10 + 1 : iters_small;
        int warmup = iters / 10 + 1;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warmup + iters; i++) {
            if (i == warmup) t0 = MPI_Wtime();
            if (rank == 0) {
                MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
        }
        double one_way = (MPI_Wtime() - t0) / iters / 2;
        if (rank == 0) printf("%ld %.3f %.1f\n", n, one_way * 1e6, n / one_way / 1e6);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
