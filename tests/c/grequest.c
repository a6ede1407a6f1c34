/* Generalized requests: the program's own operations, completed through MPI's request
 * functions. query_fn gives the status, free_fn runs once, cancel_fn decides on a cancel;
 * an error of a callback is the error of the call; waiting for one that is not complete
 * fails at once (below MPI_THREAD_MULTIPLE no other thread could complete it) instead of hanging. */
#include "check.h"

typedef struct {
    int queried, freed, cancelled, cancel_complete, query_error;
} op_state;

static int query(void *extra, MPI_Status *st) {
    op_state *s = extra;
    s->queried++;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    st->MPI_SOURCE = rank;
    st->MPI_TAG = 42;
    MPI_Status_set_elements(st, MPI_INT, 3);
    MPI_Status_set_cancelled(st, 0);
    return s->query_error;
}

static int release(void *extra) {
    ((op_state *)extra)->freed++;
    return MPI_SUCCESS;
}

static int cancel(void *extra, int complete) {
    op_state *s = extra;
    s->cancelled++;
    s->cancel_complete = complete;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, n, flag;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Status st;
    MPI_Request req;

    /* Test before and after the program completes it; Wait gives query_fn's status. */
    op_state a = {0};
    CHECK_OK(MPI_Grequest_start(query, release, cancel, &a, &req));
    CHECK_OK(MPI_Test(&req, &flag, &st));
    CHECK(!flag && a.queried == 0 && a.freed == 0);
    CHECK_OK(MPI_Grequest_complete(req));
    CHECK_OK(MPI_Request_get_status(req, &flag, &st));
    CHECK(flag && a.queried == 1 && a.freed == 0 && st.MPI_TAG == 42);
    CHECK_OK(MPI_Wait(&req, &st));
    CHECK(req == MPI_REQUEST_NULL && a.queried == 2 && a.freed == 1);
    CHECK(st.MPI_SOURCE == rank && st.MPI_TAG == 42);
    CHECK_OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 3);

    /* Waiting for one nobody completed fails at once (on pontoon; another MPI may wait
     * for ever); completed later, it finishes. */
    op_state b = {0};
    CHECK_OK(MPI_Grequest_start(query, release, cancel, &b, &req));
    int err, class;
    if (on_pontoon()) {
        err = MPI_Wait(&req, &st);
        MPI_Error_class(err, &class);
        CHECK(class == MPI_ERR_REQUEST && req != MPI_REQUEST_NULL && b.freed == 0);
        MPI_Request two[2] = {req, MPI_REQUEST_NULL};
        int index;
        err = MPI_Waitany(2, two, &index, &st);
        MPI_Error_class(err, &class);
        CHECK(class == MPI_ERR_REQUEST);
    }
    /* Cancel asks cancel_fn, telling it the operation is not complete. */
    CHECK_OK(MPI_Cancel(&req));
    CHECK(b.cancelled == 1 && b.cancel_complete == 0);
    CHECK_OK(MPI_Grequest_complete(req));

    /* Mixed with point-to-point requests in Waitall. */
    int out = rank, in = -1;
    MPI_Request mix[3];
    mix[0] = req;
    CHECK_OK(MPI_Irecv(&in, 1, MPI_INT, (rank + size - 1) % size, 7, MPI_COMM_WORLD, &mix[1]));
    CHECK_OK(MPI_Isend(&out, 1, MPI_INT, (rank + 1) % size, 7, MPI_COMM_WORLD, &mix[2]));
    MPI_Status sts[3];
    CHECK_OK(MPI_Waitall(3, mix, sts));
    CHECK(b.freed == 1 && sts[0].MPI_TAG == 42 && in == (rank + size - 1) % size);

    /* An error of query_fn is the wait's; in Waitall it is in the status. */
    op_state c = {0};
    c.query_error = MPI_ERR_OTHER;
    CHECK_OK(MPI_Grequest_start(query, release, cancel, &c, &req));
    CHECK_OK(MPI_Grequest_complete(req));
    err = MPI_Wait(&req, &st);
    MPI_Error_class(err, &class);
    CHECK(class == MPI_ERR_OTHER && c.freed == 1);
    op_state d = {0}, e = {0};
    d.query_error = MPI_ERR_OTHER;
    CHECK_OK(MPI_Grequest_start(query, release, cancel, &d, &mix[0]));
    CHECK_OK(MPI_Grequest_start(query, release, cancel, &e, &mix[1]));
    CHECK_OK(MPI_Grequest_complete(mix[0]));
    CHECK_OK(MPI_Grequest_complete(mix[1]));
    err = MPI_Waitall(2, mix, sts);
    MPI_Error_class(err, &class);
    CHECK(class == MPI_ERR_IN_STATUS);
    MPI_Error_class(sts[0].MPI_ERROR, &class);
    CHECK(class == MPI_ERR_OTHER && d.freed == 1);
    /* The other completed, or (as MPICH does) was left pending for a later wait. */
    MPI_Error_class(sts[1].MPI_ERROR, &class);
    CHECK(class == MPI_SUCCESS || (class == MPI_ERR_PENDING && !on_pontoon()));
    if (class == MPI_ERR_PENDING)
        CHECK_OK(MPI_Wait(&mix[1], MPI_STATUS_IGNORE));
    CHECK(e.freed == 1);

    /* Freed before it completes: free_fn runs once both MPI_Request_free and
     * MPI_Grequest_complete have been called, in the later of the two; never query_fn. */
    op_state f = {0}, g = {0};
    CHECK_OK(MPI_Grequest_start(query, release, cancel, &f, &req));
    MPI_Request kept = req;
    CHECK_OK(MPI_Request_free(&req));
    /* (MPICH 4.0 runs free_fn here already, before the operation completed.) */
    CHECK(req == MPI_REQUEST_NULL && (f.freed == 0 || !on_pontoon()));
    CHECK_OK(MPI_Grequest_complete(kept));
    CHECK(f.freed == 1 && f.queried == 0);
    CHECK_OK(MPI_Grequest_start(query, release, cancel, &g, &req));
    CHECK_OK(MPI_Grequest_complete(req));
    CHECK_OK(MPI_Request_free(&req));
    CHECK(req == MPI_REQUEST_NULL && g.freed == 1 && g.queried == 0);

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("grequest OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
