/* The first message to a far rank, then a long computation without MPI calls. The lower
 * rank opens its WAN path's further streams as soon as the first lane is up, but sends
 * their HELLOs only from within MPI calls, and the far rank drops a connection that
 * stays silent past PONTOON_ATTEMPT_TIMEOUT_MS: the streams must come up all the same
 * (dialled again) and the messages after the computation arrive intact. The test counts
 * the lanes in the log (issue 19). */
#define _POSIX_C_SOURCE 200809L
#include <string.h>
#include <time.h>
#include "check.h"

enum { COMPUTE_MS = 2500, ROUNDS = 20, LEN = 1 << 20 };

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    CHECK(p == 2);
    char hello[8] = "hello";
    if (rank == 0) {
        CHECK_OK(MPI_Send(hello, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD));
        struct timespec compute = {COMPUTE_MS / 1000, (COMPUTE_MS % 1000) * 1000000L};
        nanosleep(&compute, NULL);
    } else {
        memset(hello, 0, sizeof hello);
        CHECK_OK(MPI_Recv(hello, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(strcmp(hello, "hello") == 0);
    }
    static unsigned char buf[LEN];
    for (int round = 0; round < ROUNDS; round++) {
        if (rank == 0) {
            for (int i = 0; i < LEN; i++) buf[i] = (unsigned char)(i * 7 + round);
            CHECK_OK(MPI_Send(buf, LEN, MPI_BYTE, 1, 1, MPI_COMM_WORLD));
            CHECK_OK(MPI_Recv(buf, LEN, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (int i = 0; i < LEN; i++) CHECK(buf[i] == (unsigned char)(i * 7 + round + 1));
        } else {
            CHECK_OK(MPI_Recv(buf, LEN, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (int i = 0; i < LEN; i++) buf[i]++;
            CHECK_OK(MPI_Send(buf, LEN, MPI_BYTE, 0, 2, MPI_COMM_WORLD));
        }
    }
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0) printf("compute_after_wireup OK\n");
    CHECK_OK(MPI_Finalize());
    return 0;
}
