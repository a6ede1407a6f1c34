/* How much of a transfer an MPI hides behind computation (seed 002's mpptest idea; the
 * osu_i* overlap figure), in plain standard MPI (any mpicc). Ranks 0 and 1 exchange one
 * message each way per iteration with MPI_Irecv + MPI_Isend, then MPI_Waitall. Per size:
 *   t_comm  the exchange alone;
 *   t_cpu   a compute loop (no MPI call inside) calibrated to last about t_comm;
 *   t_both  post the exchange, compute, then wait.
 * hidden = (t_comm + t_cpu - t_both) / t_comm, within 0..1: the share of the transfer
 * that went on while the application computed. An MPI that moves data only inside its
 * calls hides little beyond what the kernel's socket buffers take at once.
 * Prints one line per size:
 *     SIZE_BYTES HIDDEN_PERCENT T_COMM_US T_BOTH_US
 * The first line names the MPI library.
 * Usage: overlap [MAX_BYTES [ITERS [OPERATION]]]  (defaults 1048576, 200 and `exchange`;
 * sizes from 1 KiB by 4). OPERATION `iallreduce`: every rank's MPI_Iallreduce (sum) of
 * SIZE_BYTES of doubles instead of the exchange. Extra ranks wait at the barriers of the
 * exchange. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile double sink;
static int allreduce;

/* `units` rounds of dependent arithmetic the compiler cannot drop or hoist. */
static void compute(long units) {
    double x = sink + 1.0;
    for (long i = 0; i < units; i++) x = x * 1.0000001 + 1e-9;
    sink = x;
}

/* Average seconds of one exchange of `n` bytes each way, with `units` of computation
 * between posting it and waiting for it (rank 0's time; rank 1 mirrors). */
static double exchange(char *out, char *in, long n, long units, int iters, int rank) {
    int peer = 1 - rank;
    MPI_Request reqs[2];
    MPI_Status statuses[2];
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (allreduce) {
            MPI_Iallreduce(out, in, (int)(n / 8), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &reqs[0]);
            compute(units);
            MPI_Wait(&reqs[0], &statuses[0]);
            continue;
        }
        if (rank > 1) continue;
        MPI_Irecv(in, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &reqs[0]);
        MPI_Isend(out, (int)n, MPI_BYTE, peer, 3, MPI_COMM_WORLD, &reqs[1]);
        compute(units);
        MPI_Waitall(2, reqs, statuses);
    }
    double t = (MPI_Wtime() - t0) / iters;
    MPI_Bcast(&t, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    return t;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long max = argc > 1 ? atol(argv[1]) : 1L << 20;
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    allreduce = argc > 3 && strcmp(argv[3], "iallreduce") == 0;
    if (size < 2 || iters < 1 || max < 1) {
        if (rank == 0) fprintf(stderr, "overlap [MAX_BYTES [ITERS]] needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *out = malloc((size_t)max), *in = malloc((size_t)max);
    for (long i = 0; i < max / 8; i++) ((double *)out)[i] = 1.0;
    /* Seconds per unit of computation, measured alone (the same on both ranks: rank 0's). */
    double t0 = MPI_Wtime();
    compute(20 * 1000 * 1000);
    double per_unit = (MPI_Wtime() - t0) / (20.0 * 1000 * 1000);
    MPI_Bcast(&per_unit, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0) printf("# library: %s\n# bytes hidden_percent t_comm_us t_both_us\n", lib);
    for (long n = 1024; n <= max; n *= 4) {
        int it = n > 65536 ? iters / 4 + 1 : iters;
        exchange(out, in, n, 0, it / 10 + 1, rank); /* warm-up */
        double comm = exchange(out, in, n, 0, it, rank);
        long units = (long)(comm / per_unit);
        double cpu = units * per_unit;
        double both = exchange(out, in, n, units, it, rank);
        double hidden = (comm + cpu - both) / comm;
        if (hidden < 0) hidden = 0;
        if (hidden > 1) hidden = 1;
        if (rank == 0) {
            printf("%ld %.1f %.2f %.2f\n", n, hidden * 100, comm * 1e6, both * 1e6);
            fflush(stdout);
        }
    }
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
