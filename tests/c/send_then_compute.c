/* Two small messages back to back, then a long computation without MPI calls, a few
 * times over: the second message must not wait for the sender's next MPI call. Across a
 * WAN path pontoon coalesces small messages that follow each other closely; a batch
 * held when MPI_Send returned left only when the sender called in again (issue 19).
 * Rank 1 checks that each second message came within WAIT_MS of the first. */
#define _POSIX_C_SOURCE 200809L
#include <time.h>
#include "check.h"

enum { ROUNDS = 4, COMPUTE_MS = 400, WAIT_MS = 150 };

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    CHECK(p == 2);
    for (int round = 0; round < ROUNDS; round++) {
        char a[8] = {(char)round}, b[8] = {(char)(round + 100)};
        if (rank == 0) {
            CHECK_OK(MPI_Send(a, 8, MPI_BYTE, 1, 1, MPI_COMM_WORLD));
            CHECK_OK(MPI_Send(b, 8, MPI_BYTE, 1, 2, MPI_COMM_WORLD));
            struct timespec compute = {0, COMPUTE_MS * 1000000L};
            nanosleep(&compute, NULL);
        } else {
            CHECK_OK(MPI_Recv(a, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            double t = MPI_Wtime();
            CHECK_OK(MPI_Recv(b, 8, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            double waited_ms = (MPI_Wtime() - t) * 1e3;
            if (waited_ms > WAIT_MS) fprintf(stderr, "round %d: the second message came %.0f ms after the first\n", round, waited_ms);
            CHECK(waited_ms <= WAIT_MS);
            CHECK(a[0] == (char)round && b[0] == (char)(round + 100));
        }
    }
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("send_then_compute OK\n");
    CHECK_OK(MPI_Finalize());
    return 0;
}
