/* Seed 002's communication thread, in plain standard MPI (any mpicc): "separating the
 * MPI data transfer and the local computation into unique threads". Ranks 0 and 1
 * exchange a message each way per iteration (MPI_Sendrecv) and compute between them.
 * Per size:
 *   t_loop  one thread: exchange, then compute, iteration after iteration;
 *   t_two   two threads: one does the exchanges, the other the computation, at once;
 * the computation per iteration calibrated to last as long as the exchange alone.
 * speed-up = t_loop / t_two: 2 when the halves match and overlap entirely, 1 when they
 * do not overlap at all. Asks for MPI_THREAD_MULTIPLE (the main thread calls MPI
 * between the measurements) and prints one line per size:
 *     SIZE_BYTES SPEEDUP T_LOOP_US T_TWO_US
 * The first lines name the MPI library and the thread level it gave.
 * Usage: comm_thread [MAX_BYTES [ITERS]]  (defaults 1048576 and 200; sizes from 1 KiB by
 * 4). Extra ranks wait at the barriers. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile double sink;

/* `units` rounds of dependent arithmetic the compiler cannot drop or hoist. */
static void compute(long units) {
    double x = sink + 1.0;
    for (long i = 0; i < units; i++) x = x * 1.0000001 + 1e-9;
    sink = x;
}

static int rank;
static char *out, *in;

static void exchange(long n) {
    int peer = 1 - rank;
    MPI_Sendrecv(out, (int)n, MPI_BYTE, peer, 3, in, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
}

/* The communication thread's part of t_two. */
static long comm_bytes;
static int comm_iters;
static void *communicate(void *arg) {
    (void)arg;
    for (int i = 0; i < comm_iters; i++) exchange(comm_bytes);
    return NULL;
}

/* Average seconds per iteration (rank 0's, given to all): exchanges only (`units` 0),
 * the single-threaded loop, or the two threads at once. */
static double timed(long n, long units, int iters, int two_threads) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (rank <= 1) {
        if (two_threads) {
            pthread_t comm;
            comm_bytes = n, comm_iters = iters;
            pthread_create(&comm, NULL, communicate, NULL);
            for (int i = 0; i < iters; i++) compute(units);
            pthread_join(comm, NULL);
        } else {
            for (int i = 0; i < iters; i++) {
                exchange(n);
                compute(units);
            }
        }
    }
    double t = (MPI_Wtime() - t0) / iters;
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t;
}

int main(int argc, char **argv) {
    int provided = MPI_THREAD_SINGLE, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 1L << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    if (size < 2 || iters < 1 || max < 1 || provided < MPI_THREAD_SERIALIZED) {
        if (rank == 0) fprintf(stderr, "comm_thread [MAX_BYTES [ITERS]] needs 2 ranks and MPI_THREAD_SERIALIZED\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    out = malloc((size_t)max), in = malloc((size_t)max);
    memset(out, 'o', (size_t)max);
    /* Seconds per unit of computation, measured alone (rank 0's). */
    double t0 = MPI_Wtime();
    compute(20 * 1000 * 1000);
    double per_unit = (MPI_Wtime() - t0) / (20.0 * 1000 * 1000);
    MPI_Bcast(&per_unit, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0)
        printf("# library: %s\n# thread level: %s\n# bytes speedup t_loop_us t_two_us\n", lib,
               provided == MPI_THREAD_MULTIPLE ? "multiple" : "serialized");
    for (long n = 1024; n <= max; n *= 4) {
        int it = n > 65536 ? iters / 4 + 1 : iters;
        timed(n, 0, it / 10 + 1, 0); /* warm-up */
        double comm = timed(n, 0, it, 0);
        long units = (long)(comm / per_unit);
        double loop = timed(n, units, it, 0);
        double two = timed(n, units, it, 1);
        if (rank == 0) {
            printf("%ld %.3f %.2f %.2f\n", n, loop / two, loop * 1e6, two * 1e6);
            fflush(stdout);
        }
    }
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
