/* Non-blocking collectives whose results are unpacked at completion (the v and w forms),
 * completed by every completion function: the receive buffer is read right after the call
 * that first reports completion, and must hold the result then. A request that
 * MPI_Request_get_status* reported complete may be freed at once (as MPICH's nonblocking3
 * does). MPI_Request_free of a collective request that is still active is erroneous: it
 * fails with MPI_ERR_REQUEST and the request stays, still to be completed. */
#include "check.h"

enum { ALLGATHERV, ALLTOALLV, ALLTOALLW, GATHERV, KINDS };
static const char *kind_names[] = {"Iallgatherv", "Ialltoallv", "Ialltoallw", "Igatherv"};

enum { WAIT, TEST, WAITALL, TESTALL, WAITANY, TESTANY, WAITSOME, TESTSOME, GET_STATUS,
       GET_STATUS_ALL, GET_STATUS_ANY, GET_STATUS_SOME, WAYS };
static const char *way_names[] = {"Wait", "Test", "Waitall", "Testall", "Waitany", "Testany",
                                  "Waitsome", "Testsome", "Request_get_status",
                                  "Request_get_status_all", "Request_get_status_any",
                                  "Request_get_status_some"};

#define BLOCK 2
#define STRIDE 3 /* each rank's block in the receive buffer, with a gap of one */

static int rank, size, round_no;
static int counts[64], displs[64], sdispls[64], bdispls[64], sbdispls[64];
static MPI_Datatype types[64];

static void post(int kind, int *send, int *recv, MPI_Request *req) {
    switch (kind) {
    case ALLGATHERV:
        CHECK_OK(MPI_Iallgatherv(send, BLOCK, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD, req));
        break;
    case ALLTOALLV:
        CHECK_OK(MPI_Ialltoallv(send, counts, sdispls, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD,
                                req));
        break;
    case ALLTOALLW:
        CHECK_OK(MPI_Ialltoallw(send, counts, sbdispls, types, recv, counts, bdispls, types, MPI_COMM_WORLD,
                                req));
        break;
    case GATHERV:
        CHECK_OK(MPI_Igatherv(send, BLOCK, MPI_INT, recv, counts, displs, MPI_INT, 0, MPI_COMM_WORLD, req));
        break;
    }
}

/* What rank `from` sends to this rank, element j: the whole block for the gathers, block
 * `rank` of its send buffer for the alltoalls. */
static int expected(int kind, int from, int j) {
    if (kind == ALLTOALLV || kind == ALLTOALLW)
        return 1000 * (round_no + 1) + 100 * from + 10 * rank + j;
    return 1000 * (round_no + 1) + 100 * from + j;
}

static void fill_send(int kind, int *send) {
    if (kind == ALLTOALLV || kind == ALLTOALLW) {
        for (int d = 0; d < size; d++)
            for (int j = 0; j < BLOCK; j++)
                send[BLOCK * d + j] = 1000 * (round_no + 1) + 100 * rank + 10 * d + j;
    } else {
        for (int j = 0; j < BLOCK; j++)
            send[j] = 1000 * (round_no + 1) + 100 * rank + j;
    }
}

static void check_recv(int kind, const int *recv, const char *way) {
    if (kind == GATHERV && rank != 0)
        return;
    for (int r = 0; r < size; r++) {
        for (int j = 0; j < BLOCK; j++) {
            if (recv[displs[r] + j] != expected(kind, r, j)) {
                fprintf(stderr, "rank %d: %s completed by %s: element %d of rank %d's block is %d, not %d\n",
                        rank, kind_names[kind], way, j, r, recv[displs[r] + j], expected(kind, r, j));
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
        CHECK(recv[displs[r] + BLOCK] == -1); /* the gap stays */
    }
}

/* Completes `*req` the given way, polling where the way does not block; returns once the
 * call reports it complete (the buffer is read right after). The array forms get the
 * collective beside a null request. */
static void complete(int way, MPI_Request *req) {
    MPI_Request arr[2] = {MPI_REQUEST_NULL, *req};
    int flag = 0, index = -1, outcount = 0, indices[2];
    MPI_Status st, sts[2];
    switch (way) {
    case WAIT:
        CHECK_OK(MPI_Wait(req, &st));
        break;
    case TEST:
        while (!flag)
            CHECK_OK(MPI_Test(req, &flag, &st));
        break;
    case WAITALL:
        CHECK_OK(MPI_Waitall(2, arr, sts));
        break;
    case TESTALL:
        while (!flag)
            CHECK_OK(MPI_Testall(2, arr, &flag, sts));
        break;
    case WAITANY:
        CHECK_OK(MPI_Waitany(2, arr, &index, &st));
        CHECK(index == 1);
        break;
    case TESTANY:
        while (!flag)
            CHECK_OK(MPI_Testany(2, arr, &index, &flag, &st));
        CHECK(index == 1);
        break;
    case WAITSOME:
        CHECK_OK(MPI_Waitsome(2, arr, &outcount, indices, sts));
        CHECK(outcount == 1 && indices[0] == 1);
        break;
    case TESTSOME:
        while (outcount == 0)
            CHECK_OK(MPI_Testsome(2, arr, &outcount, indices, sts));
        CHECK(outcount == 1 && indices[0] == 1);
        break;
    case GET_STATUS:
        while (!flag)
            CHECK_OK(MPI_Request_get_status(*req, &flag, &st));
        break;
    case GET_STATUS_ALL:
        while (!flag)
            CHECK_OK(MPI_Request_get_status_all(2, arr, &flag, sts));
        break;
    case GET_STATUS_ANY:
        while (!flag)
            CHECK_OK(MPI_Request_get_status_any(2, arr, &index, &flag, &st));
        CHECK(index == 1);
        break;
    case GET_STATUS_SOME:
        while (outcount == 0)
            CHECK_OK(MPI_Request_get_status_some(2, arr, &outcount, indices, sts));
        CHECK(outcount == 1 && indices[0] == 1);
        break;
    }
    if (way != WAIT && way != TEST && way != GET_STATUS)
        *req = arr[1];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 64);
    for (int r = 0; r < size; r++) {
        counts[r] = BLOCK;
        displs[r] = STRIDE * (size - 1 - r); /* blocks in reverse rank order */
        sdispls[r] = BLOCK * r;
        bdispls[r] = displs[r] * (int)sizeof(int);
        sbdispls[r] = sdispls[r] * (int)sizeof(int);
        types[r] = MPI_INT;
    }
    int *send = malloc(BLOCK * size * sizeof(int)), *recv = malloc(STRIDE * size * sizeof(int));
    for (int kind = 0; kind < KINDS; kind++) {
        for (int way = 0; way < WAYS; way++) {
            round_no++;
            fill_send(kind, send);
            for (int i = 0; i < STRIDE * size; i++)
                recv[i] = -1;
            MPI_Request req;
            post(kind, send, recv, &req);
            complete(way, &req);
            check_recv(kind, recv, way_names[way]);
            if (way >= GET_STATUS) {
                /* Reported complete and not freed: freeing it now is fine. */
                CHECK(req != MPI_REQUEST_NULL);
                CHECK_OK(MPI_Request_free(&req));
            }
            CHECK(req == MPI_REQUEST_NULL);
        }
    }

    /* Freeing a collective request that is still active. Rank 0 posts first and the
     * others only once it has tried, so its request cannot have completed. */
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    for (int kind = 0; kind < KINDS && size > 1; kind++) {
        round_no++;
        fill_send(kind, send);
        for (int i = 0; i < STRIDE * size; i++)
            recv[i] = -1;
        MPI_Request req;
        int go = 0;
        if (rank == 0) {
            post(kind, send, recv, &req);
            MPI_Request kept = req;
            int rc = MPI_Request_free(&req), class = -1;
            MPI_Error_class(rc, &class);
            if (class != MPI_ERR_REQUEST) {
                fprintf(stderr, "rank 0: MPI_Request_free of an active %s gave class %d, not MPI_ERR_REQUEST\n",
                        kind_names[kind], class);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            CHECK(req == kept); /* still the program's to complete */
            for (int r = 1; r < size; r++)
                CHECK_OK(MPI_Send(&go, 1, MPI_INT, r, 7, MPI_COMM_WORLD));
        } else {
            CHECK_OK(MPI_Recv(&go, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            post(kind, send, recv, &req);
        }
        CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        check_recv(kind, recv, "Wait after a refused free");
    }
    free(send);
    free(recv);
    if (rank == 0)
        printf("completion OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
