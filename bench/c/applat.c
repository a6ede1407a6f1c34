/* Application latency (MPBench's third test beside bandwidth and roundtrip), in plain
 * standard MPI (any mpicc): what a blocking MPI_Send costs the application that makes
 * it. Rank 0 sends messages to rank 1 back to back with MPI_Send and times each call
 * until it returns; rank 1 receives them with MPI_Recv and acknowledges every 64, so
 * the sender never runs more than a window ahead. Small messages return as soon as
 * the MPI has taken them (eager); large ones when the receiver has them (rendezvous).
 * Prints one line per size:
 *     SIZE_BYTES SEND_US
 * The first line names the MPI library.
 * Usage: applat [MAX_BYTES [ITERS]]  (defaults 1048576 and 10000; fewer iterations
 * above 8 KiB, as OSU does). Extra ranks wait at the barriers. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 1L << 20;
    int iters_small = argc > 2 ? atoi(argv[2]) : 10000;
    if (size < 2 || iters_small < 1) {
        if (rank == 0) fprintf(stderr, "applat [MAX_BYTES [ITERS]] needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = malloc(max > 0 ? (size_t)max : 1);
    memset(buf, 'a', max > 0 ? (size_t)max : 1);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0) printf("# library: %s\n# bytes send_us\n", lib);
    char ack = 0;
    for (long n = 0; n <= max; n = n ? n * 2 : 1) {
        int iters = n > 8192 ? iters_small / 10 + 1 : iters_small;
        int warmup = iters / 10 + 1;
        double in_send = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warmup + iters; i++) {
            if (rank == 0) {
                double t0 = MPI_Wtime();
                MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                if (i >= warmup) in_send += MPI_Wtime() - t0;
                if ((i + 1) % WINDOW == 0 || i + 1 == warmup + iters)
                    MPI_Recv(&ack, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if ((i + 1) % WINDOW == 0 || i + 1 == warmup + iters)
                    MPI_Send(&ack, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) printf("%ld %.3f\n", n, in_send / iters * 1e6);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
