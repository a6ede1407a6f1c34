/* Erroneous calls and calls from callbacks: each must give an MPI error (or work), never a
 * panic, a crash or a hang. With MPI_ERRORS_RETURN on COMM_WORLD and COMM_SELF:
 * - waiting on, testing or freeing a request that was completed or freed already;
 * - starting a persistent request that is active;
 * - a user reduction that calls MPI while pontoon runs it: a call that needs the engine
 *   while it is busy (a send) fails with MPI_ERR_OTHER, calls that do not (rank, Wtime)
 *   work, and the reduction is right;
 * - an attribute's delete callback, an error handler and a generalized request's
 *   query_fn that call MPI, on the objects being worked on. */
#include "check.h"

static int rank, size;

static int class_of(int rc) {
    int c = -1;
    MPI_Error_class(rc, &c);
    return c;
}

/* ---- a user reduction that calls MPI -------------------------------------------- */
static int op_calls, op_send_rc = MPI_SUCCESS, op_rank = -1;
static double op_time;

static void sum_calling_mpi(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    op_calls++;
    int one = 1;
    op_send_rc = MPI_Send(&one, 1, MPI_INT, rank, 99, MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &op_rank);
    op_time = MPI_Wtime();
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

/* ---- an attribute whose delete callback calls MPI on its communicator ------------- */
static int other_key, deleted, delete_rank = -1, delete_found_other;

static int delete_calling_mpi(MPI_Comm comm, int key, void *value, void *extra) {
    (void)key;
    (void)value;
    (void)extra;
    deleted++;
    MPI_Comm_rank(comm, &delete_rank);
    void *v;
    MPI_Comm_get_attr(comm, other_key, &v, &delete_found_other);
    return MPI_SUCCESS;
}

/* ---- an error handler that calls MPI ------------------------------------------------ */
static int handled, handler_size = -1;
static char handler_text[MPI_MAX_ERROR_STRING];

static void handler_calling_mpi(MPI_Comm *comm, int *code, ...) {
    handled++;
    int len;
    MPI_Error_string(*code, handler_text, &len);
    MPI_Comm_size(*comm, &handler_size);
}

/* ---- a generalized request whose query_fn calls MPI -------------------------------- */
static MPI_Request inner;
static int query_flag = -1, query_rc = -1;

static int query_calling_mpi(void *extra, MPI_Status *st) {
    (void)extra;
    query_rc = MPI_Request_get_status(inner, &query_flag, MPI_STATUS_IGNORE);
    MPI_Status_set_elements(st, MPI_BYTE, 0);
    MPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}
static int free_nothing(void *extra) {
    (void)extra;
    return MPI_SUCCESS;
}
static int cancel_nothing(void *extra, int complete) {
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));

    /* Requests used up. */
    int x = rank, y = -1;
    MPI_Request req, copy;
    CHECK_OK(MPI_Irecv(&y, 1, MPI_INT, rank, 5, MPI_COMM_WORLD, &req));
    CHECK_OK(MPI_Send(&x, 1, MPI_INT, rank, 5, MPI_COMM_WORLD));
    copy = req;
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(req == MPI_REQUEST_NULL && y == rank);
    int flag = 0;
    CHECK(class_of(MPI_Wait(&copy, MPI_STATUS_IGNORE)) == MPI_ERR_REQUEST);
    CHECK(class_of(MPI_Test(&copy, &flag, MPI_STATUS_IGNORE)) == MPI_ERR_REQUEST);
    CHECK(class_of(MPI_Request_get_status(copy, &flag, MPI_STATUS_IGNORE)) == MPI_ERR_REQUEST);
    CHECK(class_of(MPI_Request_free(&copy)) == MPI_ERR_REQUEST);
    MPI_Request null = MPI_REQUEST_NULL;
    CHECK(class_of(MPI_Request_free(&null)) == MPI_ERR_REQUEST);

    /* A persistent request started twice. */
    MPI_Request p;
    CHECK_OK(MPI_Recv_init(&y, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, &p));
    CHECK_OK(MPI_Start(&p));
    CHECK(class_of(MPI_Start(&p)) == MPI_ERR_REQUEST);
    CHECK_OK(MPI_Send(&x, 1, MPI_INT, rank, 6, MPI_COMM_WORLD));
    CHECK_OK(MPI_Wait(&p, MPI_STATUS_IGNORE));
    CHECK_OK(MPI_Request_free(&p));

    /* A user reduction calling MPI, in a blocking and a non-blocking allreduce. */
    MPI_Op op;
    CHECK_OK(MPI_Op_create(sum_calling_mpi, 1, &op));
    int v[3] = {rank, 1, 2 * rank}, r[3];
    CHECK_OK(MPI_Allreduce(v, r, 3, MPI_INT, op, MPI_COMM_WORLD));
    CHECK(r[0] == size * (size - 1) / 2 && r[1] == size && r[2] == size * (size - 1));
    MPI_Request ar;
    CHECK_OK(MPI_Iallreduce(v, r, 3, MPI_INT, op, MPI_COMM_WORLD, &ar));
    CHECK_OK(MPI_Wait(&ar, MPI_STATUS_IGNORE));
    CHECK(r[0] == size * (size - 1) / 2 && r[1] == size && r[2] == size * (size - 1));
    if (op_calls > 0) {
        /* A send where the engine is running the reduction is refused with an error. */
        CHECK(op_send_rc == MPI_SUCCESS || class_of(op_send_rc) == MPI_ERR_OTHER);
        CHECK(op_rank == rank && op_time > 0);
    }
    CHECK_OK(MPI_Op_free(&op));
    /* Whatever the sends did, nothing of them is left behind to match. */
    int pending = 1;
    while (pending) {
        MPI_Status st;
        CHECK_OK(MPI_Iprobe(rank, 99, MPI_COMM_WORLD, &pending, &st));
        if (pending)
            CHECK_OK(MPI_Recv(&y, 1, MPI_INT, rank, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }

    /* A delete callback calling MPI on the communicator being freed. */
    MPI_Comm dup;
    int key;
    CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    CHECK_OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_calling_mpi, &key, NULL));
    CHECK_OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &other_key, NULL));
    CHECK_OK(MPI_Comm_set_attr(dup, other_key, &x));
    CHECK_OK(MPI_Comm_set_attr(dup, key, &x));
    CHECK_OK(MPI_Comm_free(&dup));
    CHECK(deleted == 1 && delete_rank == rank);
    CHECK_OK(MPI_Comm_free_keyval(&key));
    CHECK_OK(MPI_Comm_free_keyval(&other_key));

    /* An error handler calling MPI. */
    MPI_Errhandler eh;
    CHECK_OK(MPI_Comm_create_errhandler(handler_calling_mpi, &eh));
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, eh));
    int rc = MPI_Send(&x, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
    CHECK(rc != MPI_SUCCESS && handled == 1 && handler_size == size && handler_text[0] != 0);
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_OK(MPI_Errhandler_free(&eh));

    /* A generalized request whose query_fn looks at another request. */
    MPI_Request g;
    CHECK_OK(MPI_Irecv(&y, 1, MPI_INT, rank, 8, MPI_COMM_WORLD, &inner));
    CHECK_OK(MPI_Grequest_start(query_calling_mpi, free_nothing, cancel_nothing, NULL, &g));
    CHECK_OK(MPI_Grequest_complete(g));
    CHECK_OK(MPI_Request_get_status(g, &flag, MPI_STATUS_IGNORE));
    CHECK(flag == 1 && query_rc == MPI_SUCCESS && query_flag == 0);
    CHECK_OK(MPI_Wait(&g, MPI_STATUS_IGNORE));
    CHECK_OK(MPI_Send(&x, 1, MPI_INT, rank, 8, MPI_COMM_WORLD));
    CHECK_OK(MPI_Wait(&inner, MPI_STATUS_IGNORE));

    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 0)
        printf("reenter OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
