/* Progress while the application computes: rank 0 starts a send of 32 MiB (more than
 * the sockets hold, a rendezvous) and then makes no MPI call; rank 1 receives it and
 * says so through a file. With a progress thread (PONTOON_ASYNC_PROGRESS=on) the
 * transfer ends while rank 0 is away, and rank 0 sees the file; without, it cannot end
 * before rank 0's next MPI call.
 * Usage: async_progress FLAG_FILE SECONDS  (how long rank 0 waits for the file without
 * calling MPI). Rank 0 prints "progressed" or "did not progress", then completes the
 * send either way. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"

enum { BYTES = 32 << 20 };

int main(int argc, char **argv) {
    int provided = -1, rank, size;
    CHECK_OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(argc == 3 && size == 2);
    const char *flag = argv[1];
    double limit = atof(argv[2]);
    char *buf = malloc(BYTES);
    CHECK(buf != NULL);
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) {
        for (int i = 0; i < BYTES; i++) buf[i] = (char)(i * 7);
        MPI_Request r;
        CHECK_OK(MPI_Isend(buf, BYTES, MPI_BYTE, 1, 5, MPI_COMM_WORLD, &r));
        /* Away from MPI: only the file says whether rank 1 got it. */
        int seen = 0;
        for (double waited = 0; waited < limit && !seen; waited += 0.01) {
            seen = access(flag, F_OK) == 0;
            if (!seen) usleep(10000);
        }
        printf("%s\n", seen ? "progressed" : "did not progress");
        fflush(stdout);
        CHECK_OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    } else {
        CHECK_OK(MPI_Recv(buf, BYTES, MPI_BYTE, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (int i = 0; i < BYTES; i++) CHECK(buf[i] == (char)(i * 7));
        FILE *f = fopen(flag, "w");
        CHECK(f != NULL);
        fclose(f);
    }
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    free(buf);
    if (rank == 0) printf("async_progress OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
