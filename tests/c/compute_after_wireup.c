/* The first message to a far rank, then a long computation without MPI calls. The lower
 * rank opens its WAN path's further streams as soon as the first lane is up, but sends
 * their HELLOs only from within MPI calls, and the far rank drops a connection that
 * stays silent past PONTOON_ATTEMPT_TIMEOUT_MS: the streams must come up all the same
 * (dialled again) and the messages after the computation arrive intact. With a second
 * computation (AGAIN_MS) after one MPI call, the HELLO goes out but the far rank's
 * answer is read late: the lane must come up at both ends or at neither. The test counts
 * the lanes in the log (issue 19).
 *
 *   compute_after_wireup [COMPUTE_MS [AGAIN_MS [ROUNDS]]]   (2500, 0, 20) */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "check.h"

enum { LEN = 1 << 20 };

static void compute(int ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    CHECK(p == 2);
    int compute_ms = argc > 1 ? atoi(argv[1]) : 2500, again_ms = argc > 2 ? atoi(argv[2]) : 0;
    int rounds = argc > 3 ? atoi(argv[3]) : 20;
    char hello[8] = "hello";
    if (rank == 0) {
        CHECK_OK(MPI_Send(hello, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD));
        compute(compute_ms);
        if (again_ms > 0) {
            int flag;
            CHECK_OK(MPI_Iprobe(1, 9, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
            compute(again_ms);
        }
    } else {
        memset(hello, 0, sizeof hello);
        CHECK_OK(MPI_Recv(hello, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(strcmp(hello, "hello") == 0);
    }
    static unsigned char buf[LEN];
    for (int round = 0; round < rounds; round++) {
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
