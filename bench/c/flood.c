/* An N:1 flood of eager-sized messages: every rank but 0 starts COUNT sends of SIZE
 * bytes to rank 0 at once, while rank 0 asks for the last message of the last sender
 * first, so everything else arrives unexpected. Rank 0 checks every byte and prints
 * its peak resident memory (getrusage ru_maxrss): how much an MPI buffers for a rank
 * that is busy when a flood comes in.
 *   mpiexec -n 17 ./flood [COUNT [SIZE]]      (defaults 256 and 32768: 128 MiB from 16) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static unsigned char pattern(int src, int tag, long i) {
    return (unsigned char)(i ^ (src * 131) ^ (tag * 7));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int count = argc > 1 ? atoi(argv[1]) : 256;
    long len = argc > 2 ? atol(argv[2]) : 32768;
    if (rank > 0) {
        unsigned char *bufs = malloc((size_t)count * len);
        MPI_Request *reqs = malloc(sizeof(MPI_Request) * count);
        for (int t = 0; t < count; t++) {
            for (long i = 0; i < len; i++) bufs[t * len + i] = pattern(rank, t, i);
            MPI_Isend(bufs + t * len, (int)len, MPI_BYTE, 0, t, MPI_COMM_WORLD, &reqs[t]);
        }
        MPI_Waitall(count, reqs, MPI_STATUSES_IGNORE);
        free(bufs);
        free(reqs);
    } else {
        unsigned char *buf = malloc(len);
        long bad = 0;
        double t0 = MPI_Wtime();
        for (int src = size - 1; src >= 1; src--) {
            for (int t = count - 1; t >= 0; t--) {
                MPI_Recv(buf, (int)len, MPI_BYTE, src, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                for (long i = 0; i < len; i++) bad += buf[i] != pattern(src, t, i);
            }
        }
        double secs = MPI_Wtime() - t0;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        printf("flood %d x %d x %ld B: %ld bad bytes, %.3f s, rank 0 peak RSS %ld KiB\n", size - 1, count,
               len, bad, secs, ru.ru_maxrss);
        free(buf);
        if (bad) MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Finalize();
    return 0;
}
