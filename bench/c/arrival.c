/* One collective's latency, free of the skew a barrier leaves between the ranks: every
 * call starts on every rank at the same instant of a clock the ranks share, and lasts
 * until the last rank returns from it. Averaged over back-to-back calls or timed between
 * barriers (bench/c/collective.c, the OSU method), a collective's figure depends on
 * when each rank left the call before: across sites 20 ms apart, a rank that left a
 * barrier early waits a whole round trip in the next broadcast, one that left it late
 * none, and a barrier that lets the far site go late makes the broadcast look fast.
 *
 * The clock is CLOCK_REALTIME: the hosts of a `pontoon testbed` are network namespaces
 * of one kernel and share it exactly; across real hosts it is only as good as their
 * clock synchronisation. Call i starts at T + i * PERIOD (T chosen by rank 0 after warm-up
 * calls); each rank sleeps until then (8 ranks spinning on 2 CPUs would
 * start late by a time slice), calls, and notes when it returned.
 * Prints, on rank 0, for each call the time from its start to the last rank's return:
 *     OP BYTES MEDIAN_MS MIN_MS MAX_MS
 * Usage: arrival bcast|allreduce|allgather|alltoall [BYTES [CALLS [PERIOD_MS]]]
 * (8 bytes, 20 calls, 100 ms by default; PERIOD must exceed one call). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *op = argc > 1 ? argv[1] : "";
    int kind = !strcmp(op, "bcast") ? 0 : !strcmp(op, "allreduce") ? 1 : !strcmp(op, "allgather") ? 2 : !strcmp(op, "alltoall") ? 3 : -1;
    long bytes = argc > 2 ? atol(argv[2]) : 8;
    int calls = argc > 3 ? atoi(argv[3]) : 20;
    double period = (argc > 4 ? atof(argv[4]) : 100.0) * 1e-3;
    if (kind < 0 || bytes < 8 || calls < 1 || period <= 0) {
        if (rank == 0)
            fprintf(stderr, "usage: arrival bcast|allreduce|allgather|alltoall [BYTES >= 8 [CALLS [PERIOD_MS]]]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t span = (size_t)bytes * (kind >= 2 ? (size_t)size : 1);
    char *a = calloc(span, 1), *b = calloc(span, 1);
    double *done = calloc((size_t)calls, sizeof(double)), *last = calloc((size_t)calls, sizeof(double));
    /* Warm-up calls of each kind wire up every path the calls take; then rank 0 picks
     * the first start, a second ahead, and every rank learns it. */
    double start = 0;
    for (int i = 0; i < 3; i++) {
        MPI_Bcast(a, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, a, (int)(bytes / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Alltoall(a, 1, MPI_BYTE, b, 1, MPI_BYTE, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    if (rank == 0) start = now() + 1.0;
    MPI_Bcast(&start, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    for (int i = 0; i < calls; i++) {
        double at = start + i * period;
        if (now() > at) {
            fprintf(stderr, "rank %d: call %d started %.3f ms late: raise PERIOD_MS\n", rank, i, (now() - at) * 1e3);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
        struct timespec wake = {.tv_sec = (time_t)at, .tv_nsec = (long)((at - (double)(time_t)at) * 1e9)};
        while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &wake, NULL) != 0) {
        }
        if (kind == 0)
            MPI_Bcast(a, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        else if (kind == 1)
            MPI_Allreduce(a, b, (int)(bytes / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        else if (kind == 2)
            MPI_Allgather(a, (int)bytes, MPI_BYTE, b, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        else
            MPI_Alltoall(a, (int)bytes, MPI_BYTE, b, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
        done[i] = now() - at;
    }
    MPI_Reduce(done, last, calls, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(last, (size_t)calls, sizeof(double), by_value);
        printf("%s %ld %.3f %.3f %.3f\n", op, bytes, last[calls / 2] * 1e3, last[0] * 1e3, last[calls - 1] * 1e3);
    }
    free(a);
    free(b);
    free(done);
    free(last);
    MPI_Finalize();
    return 0;
}
