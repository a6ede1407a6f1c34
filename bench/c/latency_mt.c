/* Multi-threaded one-way latency between ranks 0 and 1 in plain standard MPI (any
 * mpicc), the method of osu_latency_mt: MPI_THREAD_MULTIPLE, THREADS threads on each
 * rank, thread t of rank 0 ping-pongs with thread t of rank 1 (on tag t), all pairs at
 * once. For each size: warm-up round trips, then timed ones; a pair's one-way time is
 * half its round trip, and the figure is the mean over the pairs. Prints one line per
 * size:
 *     SIZE_BYTES LATENCY_US
 * The first lines name the MPI library and the thread level it gave.
 * Usage: latency_mt [MAX_BYTES [ITERS [THREADS]]]  (defaults 4194304, 10000 and 2; fewer
 * iterations above 8 KiB, as OSU does). Extra ranks wait at the barriers. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers under -std=c11 */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;
static long size_now;
static int iters_now, warmup_now;
static char *bufs[64];
static double one_way[64];
static pthread_barrier_t start;

static void *pair(void *arg) {
    int t = (int)(long)arg;
    char *buf = bufs[t];
    int n = (int)size_now;
    pthread_barrier_wait(&start);
    double t0 = 0;
    for (int i = 0; i < warmup_now + iters_now; i++) {
        if (i == warmup_now) t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(buf, n, MPI_BYTE, 1, t, MPI_COMM_WORLD);
            MPI_Recv(buf, n, MPI_BYTE, 1, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, n, MPI_BYTE, 0, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, n, MPI_BYTE, 0, t, MPI_COMM_WORLD);
        }
    }
    one_way[t] = (MPI_Wtime() - t0) / iters_now / 2;
    return NULL;
}

int main(int argc, char **argv) {
    int provided = MPI_THREAD_SINGLE, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 4L << 20;
    int iters_small = argc > 2 ? atoi(argv[2]) : 10000;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (size < 2 || provided != MPI_THREAD_MULTIPLE || threads < 1 || threads > 64) {
        if (rank == 0)
            fprintf(stderr, "latency_mt needs 2 ranks, MPI_THREAD_MULTIPLE and 1 to 64 threads\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int t = 0; t < threads; t++) {
        bufs[t] = malloc(max > 0 ? (size_t)max : 1);
        memset(bufs[t], 'p', max > 0 ? (size_t)max : 1);
    }
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0)
        printf("# library: %s\n# thread level: multiple\n# threads: %d pairs\n# bytes latency_us\n", lib,
               threads);
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (long n = 0; n <= max; n = n ? n * 2 : 1) {
        size_now = n;
        iters_now = n > 8192 ? iters_small / 10 + 1 : iters_small;
        warmup_now = iters_now / 10 + 1;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank < 2) {
            pthread_t ids[64];
            for (long t = 0; t < threads; t++) pthread_create(&ids[t], NULL, pair, (void *)t);
            for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
        }
        double mean = 0;
        for (int t = 0; t < threads; t++) mean += one_way[t] / threads;
        if (rank == 0) printf("%ld %.3f\n", n, mean * 1e6);
        fflush(stdout);
    }
    pthread_barrier_destroy(&start);
    for (int t = 0; t < threads; t++) free(bufs[t]);
    MPI_Finalize();
    return 0;
}
