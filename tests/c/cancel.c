/* MPI_Cancel of sends. A send no receive has matched is withdrawn, whatever its size
 * (eager, rendezvous, one copy), mode (standard, synchronous, buffered, persistent of both) or destination
 * (a peer, or self on one rank): its wait completes, MPI_Test_cancelled says so, and the
 * receiver never gets it (a receive posted afterwards gets the message sent after it).
 * A send whose receive was posted first is either delivered whole and not cancelled, or
 * (where the cancel overtook it) withdrawn with the receive still waiting. */
#include "check.h"

static const int sizes[] = {1, 100, 10000, 256 * 1024, 1 << 20};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int dest = size - 1;
    char *buf = malloc(1 << 20), *in = malloc(1 << 20);
    for (int i = 0; i < 1 << 20; i++)
        buf[i] = (char)(i * 7);

    int bsize = 2 * (1 << 20) + 4 * MPI_BSEND_OVERHEAD;
    char *bbuf = malloc(bsize);
    CHECK_OK(MPI_Buffer_attach(bbuf, bsize));
    for (int mode = 0; mode < 5; mode++) {
        for (int k = 0; k < NSIZES; k++) {
            int n = sizes[k], tag = 100 * mode + k, flag = -1, after = -1;
            if (rank == 0) {
                MPI_Request req;
                MPI_Status st;
                if (mode == 0)
                    CHECK_OK(MPI_Isend(buf, n, MPI_CHAR, dest, tag, MPI_COMM_WORLD, &req));
                else if (mode == 1)
                    CHECK_OK(MPI_Issend(buf, n, MPI_CHAR, dest, tag, MPI_COMM_WORLD, &req));
                else if (mode == 3)
                    CHECK_OK(MPI_Ibsend(buf, n, MPI_CHAR, dest, tag, MPI_COMM_WORLD, &req));
                else if (mode == 2) {
                    CHECK_OK(MPI_Send_init(buf, n, MPI_CHAR, dest, tag, MPI_COMM_WORLD, &req));
                    CHECK_OK(MPI_Start(&req));
                } else {
                    CHECK_OK(MPI_Bsend_init(buf, n, MPI_CHAR, dest, tag, MPI_COMM_WORLD, &req));
                    CHECK_OK(MPI_Start(&req));
                }
                CHECK_OK(MPI_Cancel(&req));
                if (mode == 0) {
                    /* Tested until the answer came (an eager send is complete here). */
                    int done = 0;
                    while (!done)
                        CHECK_OK(MPI_Test(&req, &done, &st));
                } else {
                    CHECK_OK(MPI_Wait(&req, &st));
                }
                CHECK_OK(MPI_Test_cancelled(&st, &flag));
                if (flag != 1) {
                    fprintf(stderr, "rank 0: mode %d, %d bytes to rank %d: not cancelled\n", mode, n, dest);
                    MPI_Abort(MPI_COMM_WORLD, 3);
                }
                /* Only now may the receiver post receives with that tag: one posted
                 * earlier would match the message before the cancel reached it. */
                CHECK_OK(MPI_Send(&flag, 1, MPI_INT, dest, 999, MPI_COMM_WORLD));
                if (mode == 2 || mode == 4) {
                    /* Started again, it goes as usual. */
                    CHECK_OK(MPI_Start(&req));
                    if (dest == 0)
                        CHECK_OK(MPI_Recv(in, n, MPI_CHAR, 0, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
                    CHECK_OK(MPI_Request_free(&req));
                }
                int next = 1000 + tag;
                CHECK_OK(MPI_Send(&next, 1, MPI_INT, dest, tag, MPI_COMM_WORLD));
            }
            if (rank == dest) {
                int go;
                CHECK_OK(MPI_Recv(&go, 1, MPI_INT, 0, 999, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                if ((mode == 2 || mode == 4) && dest != 0) {
                    MPI_Status st;
                    CHECK_OK(MPI_Recv(in, n, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &st));
                    CHECK(memcmp(in, buf, n) == 0);
                }
                /* The cancelled message is not there: the next one is. */
                MPI_Status st;
                CHECK_OK(MPI_Recv(&after, 1, MPI_INT, 0, tag, MPI_COMM_WORLD, &st));
                CHECK(after == 1000 + tag);
                CHECK_OK(MPI_Iprobe(0, tag, MPI_COMM_WORLD, &flag, &st));
                CHECK(flag == 0);
            }
            CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
        }
    }

    void *detached;
    CHECK_OK(MPI_Buffer_detach(&detached, &bsize));
    free(bbuf);

    /* Posted first: the send's message matches on arrival, and the cancel behind it
     * finds it taken, unless the cancel came first. */
    if (size > 1) {
        for (int k = 0; k < NSIZES; k++) {
            int n = sizes[k], tag = 900 + k, flag = -1;
            MPI_Request req;
            if (rank == dest) {
                memset(in, 0, n);
                CHECK_OK(MPI_Irecv(in, n, MPI_CHAR, 0, tag, MPI_COMM_WORLD, &req));
            }
            CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
            if (rank == 0) {
                MPI_Status st;
                CHECK_OK(MPI_Isend(buf, n, MPI_CHAR, dest, tag, MPI_COMM_WORLD, &req));
                CHECK_OK(MPI_Cancel(&req));
                CHECK_OK(MPI_Wait(&req, &st));
                CHECK_OK(MPI_Test_cancelled(&st, &flag));
                CHECK_OK(MPI_Send(&flag, 1, MPI_INT, dest, tag + 50, MPI_COMM_WORLD));
            }
            if (rank == dest) {
                CHECK_OK(MPI_Recv(&flag, 1, MPI_INT, 0, tag + 50, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
                if (flag == 0) {
                    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
                    CHECK(memcmp(in, buf, n) == 0);
                } else {
                    /* Withdrawn before it arrived (a CANCEL may overtake its message on
                     * another lane): the receive got nothing and is still there. */
                    MPI_Status st;
                    CHECK_OK(MPI_Cancel(&req));
                    CHECK_OK(MPI_Wait(&req, &st));
                    CHECK_OK(MPI_Test_cancelled(&st, &flag));
                    CHECK(flag == 1);
                }
            }
            CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
        }
    }
    free(buf);
    free(in);
    if (rank == 0)
        printf("cancel OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
