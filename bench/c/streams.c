/* Aggregate streaming bandwidth of an S:R traffic pattern (seed 001's 1:1, 2:1, 4:1 and
 * 4:4), in plain standard MPI (any mpicc). Ranks 0..S-1 send, ranks S..S+R-1 receive;
 * sender i streams to receiver S + i % R. Per message size, each sender posts a window
 * of up to 64 non-blocking sends (osu_bw's method; fewer when the volume is smaller than
 * 64 messages) until it moved the volume, the receivers match them and acknowledge each
 * window; the time is the slowest sender's. Prints one line per size:
 *     SIZE_BYTES AGGREGATE_MB_S CPU_S_PER_GB MESSAGES_PER_S
 * CPU_S_PER_GB: the user + system CPU seconds of every rank during the size's transfers
 * (getrusage), summed, per GB moved: what communication costs the hosts; MESSAGES_PER_S:
 * the aggregate message rate (osu_mbw_mr's figure with S:S pairs).
 * The first lines name the MPI library and the pattern.
 * Usage: streams S R [MIN_BYTES [MAX_BYTES [BYTES_PER_SENDER [FACTOR [WINDOW]]]]]
 *   (defaults 1024, 1048576, 8388608, 2, 64: each sender moves about that many bytes per
 *   size; sizes grow by FACTOR; a window holds up to WINDOW messages: a larger one keeps a
 *   long link busy with small messages, whose rate osu_bw's 64 bound to 64 per round trip).
 * Extra ranks only join the barriers. */
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
    int senders = argc > 1 ? atoi(argv[1]) : 1;
    int receivers = argc > 2 ? atoi(argv[2]) : 1;
    long min = argc > 3 ? atol(argv[3]) : 1024;
    long max = argc > 4 ? atol(argv[4]) : 1L << 20;
    long volume = argc > 5 ? atol(argv[5]) : 8L << 20;
    long factor = argc > 6 ? atol(argv[6]) : 2;
    long WINDOW = argc > 7 ? atol(argv[7]) : 64;
    if (senders < 1 || receivers < 1 || senders + receivers > size || min < 1 || max < min || factor < 2 ||
        WINDOW < 1 || WINDOW > 1 << 20) {
        if (rank == 0)
            fprintf(stderr,
                    "streams S R [MIN MAX VOLUME FACTOR WINDOW]: needs S + R <= %d ranks, 1 <= MIN <= MAX, "
                    "FACTOR >= 2 and 1 <= WINDOW <= 1048576\n",
                    size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int sender = rank < senders;
    int receiver = !sender && rank < senders + receivers;
    /* Each receiver hears from the senders that map to it. */
    int peers = 0;
    for (int s = 0; s < senders; s++)
        if (senders + s % receivers == rank) peers++;
    /* Pending receives need disjoint buffers: a window per sender at a receiver. */
    size_t span = (size_t)max * WINDOW * (size_t)(peers > 1 ? peers : 1);
    char *buf = malloc(span);
    memset(buf, 's', span);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * WINDOW * (size_t)(peers > 1 ? peers : 1));
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0)
        printf("# library: %s\n# pattern %d:%d\n# bytes aggregate_MB_s cpu_s_per_GB messages_per_s\n", lib, senders,
               receivers);
    for (long n = min; n <= max; n *= factor) {
        long window = volume / n;
        if (window > WINDOW) window = WINDOW;
        if (window < 1) window = 1;
        long iters = volume / (n * window);
        if (iters < 1) iters = 1;
        char ack = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        double cpu0 = cpu_seconds();
        double t0 = MPI_Wtime();
        for (long it = 0; it < iters; it++) {
            if (sender) {
                int to = senders + rank % receivers;
                for (int w = 0; w < window; w++)
                    MPI_Isend(buf + (size_t)w * n, (int)n, MPI_BYTE, to, 7, MPI_COMM_WORLD, &reqs[w]);
                MPI_Waitall((int)window, reqs, MPI_STATUSES_IGNORE);
                MPI_Recv(&ack, 1, MPI_BYTE, to, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (receiver) {
                int k = 0;
                for (int s = 0; s < senders; s++) {
                    if (senders + s % receivers != rank) continue;
                    for (int w = 0; w < window; w++, k++)
                        MPI_Irecv(buf + (size_t)k * n, (int)n, MPI_BYTE, s, 7, MPI_COMM_WORLD, &reqs[k]);
                }
                MPI_Waitall(k, reqs, MPI_STATUSES_IGNORE);
                for (int s = 0; s < senders; s++)
                    if (senders + s % receivers == rank) MPI_Send(&ack, 1, MPI_BYTE, s, 8, MPI_COMM_WORLD);
            }
        }
        double mine = sender ? MPI_Wtime() - t0 : 0, slowest = 0;
        double cpu = cpu_seconds() - cpu0, cpu_all = 0;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&cpu, &cpu_all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double bytes = (double)n * (double)window * (double)iters * senders;
            printf("%ld %.2f %.3f %.0f\n", n, bytes / slowest / 1e6, cpu_all / (bytes / 1e9), bytes / n / slowest);
            fflush(stdout);
        }
    }
    free(reqs);
    free(buf);
    MPI_Finalize();
    return 0;
}
