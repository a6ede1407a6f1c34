/* What an external conformance suite found (issue 21), one check each:
 * - arguments MPI declares not significant are not checked: recvcount -1 on non-roots of
 *   MPI_Gather/MPI_Igather, the send side with MPI_IN_PLACE (MPI_Alltoall, MPI_Allgather),
 *   sendcount on non-roots of MPI_Scatter;
 * - MPI_MIN/MPI_MAX on long double, MPI_MINLOC/MPI_MAXLOC on MPI_LONG_DOUBLE_INT;
 * - single-status calls (MPI_Recv, MPI_Mprobe, MPI_Mrecv, MPI_Wait) leave MPI_ERROR alone,
 *   and the empty status is written whole (error MPI_SUCCESS);
 * - MPI_Info_* before MPI_Init, MPI_Info_create_env the same before, during and after;
 *   MPI_Type_match_size for 16-byte reals; MPI_Type_vector of
 *   64 M blocks;
 * - a persistent send whose derived datatype was freed after MPI_Send_init still starts;
 * - attributes: delete callbacks on MPI_COMM_SELF at MPI_Finalize run in reverse order of
 *   setting; a keyval freed while a value uses it still reads and deletes that value; a
 *   delete callback's error is the error of the call that deleted, and the value stays;
 *   MPI-1's names (MPI_Keyval_create, MPI_Attr_put/get/delete, MPI_Keyval_free). */
#include "check.h"
#include <stdint.h>

#define SENTINEL 12345

static void not_significant(int rank, int size) {
    int one = rank + 1, all[64];
    /* Non-roots pass a nonsense receive side; the root's is what counts. */
    if (rank == 0)
        CHECK_OK(MPI_Gather(&one, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD));
    else
        CHECK_OK(MPI_Gather(&one, 1, MPI_INT, NULL, -1, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD));
    if (rank == 0)
        for (int r = 0; r < size; r++)
            CHECK(all[r] == r + 1);
    MPI_Request req;
    if (rank == 0)
        CHECK_OK(MPI_Igather(&one, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD, &req));
    else
        CHECK_OK(MPI_Igather(&one, 1, MPI_INT, NULL, -1, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD, &req));
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    if (rank == 0)
        for (int r = 0; r < size; r++)
            CHECK(all[r] == r + 1);
    /* In place: the send count and type are ignored. */
    for (int r = 0; r < size; r++)
        all[r] = r == rank ? 100 + rank : -1;
    CHECK_OK(MPI_Allgather(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, all, 1, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        CHECK(all[r] == 100 + r);
    for (int r = 0; r < size; r++)
        all[r] = 1000 * rank + r;
    CHECK_OK(MPI_Alltoall(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, all, 1, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        CHECK(all[r] == 1000 * r + rank);
    for (int r = 0; r < size; r++)
        all[r] = r == rank ? 7 * rank : -1;
    CHECK_OK(MPI_Iallgather(MPI_IN_PLACE, -1, MPI_DATATYPE_NULL, all, 1, MPI_INT, MPI_COMM_WORLD, &req));
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    for (int r = 0; r < size; r++)
        CHECK(all[r] == 7 * r);
    /* A scatter's send side matters at the root only. */
    int mine = -1;
    for (int r = 0; r < size; r++)
        all[r] = 50 + r;
    if (rank == 0)
        CHECK_OK(MPI_Scatter(all, 1, MPI_INT, &mine, 1, MPI_INT, 0, MPI_COMM_WORLD));
    else
        CHECK_OK(MPI_Scatter(NULL, -1, MPI_DATATYPE_NULL, &mine, 1, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(mine == 50 + rank);
}

static void long_double_reductions(int rank, int size) {
    long double v = (long double)rank + 0.25L, lo, hi;
    CHECK_OK(MPI_Allreduce(&v, &lo, 1, MPI_LONG_DOUBLE, MPI_MIN, MPI_COMM_WORLD));
    CHECK_OK(MPI_Allreduce(&v, &hi, 1, MPI_LONG_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    CHECK(lo == 0.25L && hi == (long double)(size - 1) + 0.25L);
    struct {
        long double value;
        int index;
    } in = {-(long double)rank, rank}, out;
    CHECK_OK(MPI_Allreduce(&in, &out, 1, MPI_LONG_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD));
    CHECK(out.value == -(long double)(size - 1) && out.index == size - 1);
    CHECK_OK(MPI_Allreduce(&in, &out, 1, MPI_LONG_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD));
    CHECK(out.value == 0.0L && out.index == 0);
}

static void status_error_left_alone(int rank, int size) {
    if (size < 2)
        return;
    int x = 0;
    MPI_Status st;
    if (rank == 0) {
        for (int i = 0; i < 3; i++)
            CHECK_OK(MPI_Send(&i, 1, MPI_INT, 1, 4, MPI_COMM_WORLD));
    } else if (rank == 1) {
        st.MPI_ERROR = SENTINEL;
        CHECK_OK(MPI_Recv(&x, 1, MPI_INT, 0, 4, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_ERROR == SENTINEL && st.MPI_SOURCE == 0 && st.MPI_TAG == 4);
        MPI_Message msg;
        st.MPI_ERROR = SENTINEL;
        CHECK_OK(MPI_Mprobe(0, 4, MPI_COMM_WORLD, &msg, &st));
        CHECK(st.MPI_ERROR == SENTINEL && st.MPI_SOURCE == 0);
        st.MPI_ERROR = SENTINEL;
        CHECK_OK(MPI_Mrecv(&x, 1, MPI_INT, &msg, &st));
        CHECK(st.MPI_ERROR == SENTINEL && x == 1);
        MPI_Request req;
        CHECK_OK(MPI_Irecv(&x, 1, MPI_INT, 0, 4, MPI_COMM_WORLD, &req));
        st.MPI_ERROR = SENTINEL;
        CHECK_OK(MPI_Wait(&req, &st));
        CHECK(st.MPI_ERROR == SENTINEL && x == 2);
    }
    /* The empty status (null requests only) is defined whole: its error is MPI_SUCCESS. */
    MPI_Request nulls[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int index;
    st.MPI_ERROR = SENTINEL;
    CHECK_OK(MPI_Waitany(2, nulls, &index, &st));
    CHECK(index == MPI_UNDEFINED && st.MPI_ERROR == MPI_SUCCESS && st.MPI_SOURCE == MPI_ANY_SOURCE);
}

static void persistent_send_outlives_its_datatype(int rank, int size) {
    if (size < 2 || rank > 1)
        return;
    int pair[2] = {rank, 40 + rank}, got[2] = {0, 0};
    MPI_Request req;
    if (rank == 0) {
        MPI_Datatype two;
        CHECK_OK(MPI_Type_contiguous(2, MPI_INT, &two));
        CHECK_OK(MPI_Type_commit(&two));
        CHECK_OK(MPI_Send_init(pair, 1, two, 1, 8, MPI_COMM_WORLD, &req));
        CHECK_OK(MPI_Type_free(&two));
        for (int i = 0; i < 2; i++) {
            CHECK_OK(MPI_Start(&req));
            CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        }
        CHECK_OK(MPI_Request_free(&req));
    } else {
        for (int i = 0; i < 2; i++) {
            CHECK_OK(MPI_Recv(got, 2, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(got[0] == 0 && got[1] == 40);
        }
    }
}

static int self_deleted[3], nself = 0, deleted_value = 0, refuse = 1;

static int on_self_delete(MPI_Comm c, int k, void *v, void *extra) {
    (void)c, (void)k, (void)extra;
    if (nself < 3)
        self_deleted[nself] = (int)(intptr_t)v;
    nself++;
    return MPI_SUCCESS;
}

static int record_delete(MPI_Comm c, int k, void *v, void *extra) {
    (void)c, (void)k, (void)extra;
    deleted_value = (int)(intptr_t)v;
    return MPI_SUCCESS;
}

static int refusing_delete(MPI_Comm c, int k, void *v, void *extra) {
    (void)c, (void)k, (void)v, (void)extra;
    return refuse ? MPI_ERR_OTHER : MPI_SUCCESS;
}

static void attributes(void) {
    /* Three values on MPI_COMM_SELF, set 1, 2, 3: finalize deletes 3, 2, 1 (checked there). */
    for (int i = 1; i <= 3; i++) {
        int k;
        CHECK_OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_self_delete, &k, NULL));
        CHECK_OK(MPI_Comm_set_attr(MPI_COMM_SELF, k, (void *)(intptr_t)i));
        CHECK_OK(MPI_Comm_free_keyval(&k));
    }
    MPI_Comm d;
    CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
    CHECK_OK(MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN));
    /* A freed keyval still reaches the value set with it, until that is deleted. */
    int k, saved, flag = 0;
    void *v = NULL;
    CHECK_OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, record_delete, &k, NULL));
    saved = k;
    CHECK_OK(MPI_Comm_set_attr(d, k, (void *)(intptr_t)42));
    CHECK_OK(MPI_Comm_free_keyval(&k));
    CHECK(k == MPI_KEYVAL_INVALID);
    CHECK_OK(MPI_Comm_get_attr(d, saved, &v, &flag));
    CHECK(flag && (intptr_t)v == 42);
    CHECK_OK(MPI_Comm_delete_attr(d, saved));
    CHECK(deleted_value == 42);
    /* A delete callback that fails: its error is the call's, and the value stays. */
    int err, class;
    CHECK_OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, refusing_delete, &k, NULL));
    CHECK_OK(MPI_Comm_set_attr(d, k, (void *)(intptr_t)7));
    err = MPI_Comm_delete_attr(d, k);
    CHECK_OK(MPI_Error_class(err, &class));
    CHECK(class == MPI_ERR_OTHER);
    CHECK_OK(MPI_Comm_get_attr(d, k, &v, &flag));
    CHECK(flag && (intptr_t)v == 7);
    CHECK(MPI_Comm_set_attr(d, k, (void *)(intptr_t)8) != MPI_SUCCESS);
    refuse = 0;
    CHECK_OK(MPI_Comm_free_keyval(&k));
    CHECK_OK(MPI_Comm_free(&d));
    /* MPI-1's names, deprecated but defined. */
    CHECK_OK(MPI_Keyval_create(MPI_NULL_COPY_FN, MPI_NULL_DELETE_FN, &k, NULL));
    CHECK_OK(MPI_Attr_put(MPI_COMM_WORLD, k, (void *)(intptr_t)5));
    CHECK_OK(MPI_Attr_get(MPI_COMM_WORLD, k, &v, &flag));
    CHECK(flag && (intptr_t)v == 5);
    CHECK_OK(MPI_Attr_delete(MPI_COMM_WORLD, k));
    CHECK_OK(MPI_Attr_get(MPI_COMM_WORLD, k, &v, &flag));
    CHECK(!flag);
    CHECK_OK(MPI_Keyval_free(&k));
}

/* MPI_Info_create_env gives the same keys and values before MPI_Init, between Init and
 * Finalize and after (MPICH's infocreateenv): 1 if `info` matches `first`. */
static int same_env(MPI_Info first, MPI_Info info) {
    int n1, n2;
    if (MPI_Info_get_nkeys(first, &n1) != MPI_SUCCESS || MPI_Info_get_nkeys(info, &n2) != MPI_SUCCESS || n1 != n2)
        return 0;
    for (int i = 0; i < n1; i++) {
        char key[MPI_MAX_INFO_KEY], v1[MPI_MAX_INFO_VAL], v2[MPI_MAX_INFO_VAL];
        int len1 = MPI_MAX_INFO_VAL, len2 = MPI_MAX_INFO_VAL, f1 = 0, f2 = 0;
        MPI_Info_get_nthkey(first, i, key);
        MPI_Info_get_string(first, key, &len1, v1, &f1);
        MPI_Info_get_string(info, key, &len2, v2, &f2);
        if (!f1 || !f2 || strcmp(v1, v2) != 0)
            return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    /* MPI-4: info objects before MPI_Init. */
    MPI_Info early, env0, env;
    char value[32];
    int flag = 0;
    CHECK_OK(MPI_Info_create_env(argc, argv, &env0));
    CHECK_OK(MPI_Info_create(&early));
    CHECK_OK(MPI_Info_set(early, "pontoon_test", "before init"));
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK_OK(MPI_Info_get(early, "pontoon_test", sizeof value - 1, value, &flag));
    CHECK(flag && strcmp(value, "before init") == 0);
    CHECK_OK(MPI_Info_free(&early));
    CHECK_OK(MPI_Info_create_env(argc, argv, &env));
    CHECK(same_env(env0, env));
    CHECK_OK(MPI_Info_free(&env));
    MPI_Datatype real16;
    int bytes = 0;
    CHECK_OK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 16, &real16));
    CHECK_OK(MPI_Type_size(real16, &bytes));
    CHECK(bytes == 16);
    /* A vector of 64 M blocks is described, not expanded ("too fragmented" before). */
    MPI_Datatype huge;
    MPI_Aint lb, extent;
    CHECK_OK(MPI_Type_vector(1 << 26, 1, 2, MPI_INT, &huge));
    CHECK_OK(MPI_Type_commit(&huge));
    CHECK_OK(MPI_Type_size(huge, &bytes));
    CHECK_OK(MPI_Type_get_extent(huge, &lb, &extent));
    CHECK(bytes == 4 << 26 && lb == 0 && extent == ((MPI_Aint)8 << 26) - 4);
    CHECK_OK(MPI_Type_free(&huge));

    not_significant(rank, size);
    long_double_reductions(rank, size);
    status_error_left_alone(rank, size);
    persistent_send_outlives_its_datatype(rank, size);
    attributes();

    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    if (nself != 3 || self_deleted[0] != 3 || self_deleted[1] != 2 || self_deleted[2] != 1) {
        fprintf(stderr, "rank %d: MPI_COMM_SELF's values were deleted %d times, in the order %d %d %d\n", rank,
                nself, self_deleted[0], self_deleted[1], self_deleted[2]);
        return 1;
    }
    /* Info objects after MPI_Finalize too. */
    if (MPI_Info_create(&early) != MPI_SUCCESS || MPI_Info_free(&early) != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: no info objects after MPI_Finalize\n", rank);
        return 1;
    }
    if (MPI_Info_create_env(argc, argv, &env) != MPI_SUCCESS || !same_env(env0, env)) {
        fprintf(stderr, "rank %d: MPI_Info_create_env differs after MPI_Finalize\n", rank);
        return 1;
    }
    MPI_Info_free(&env);
    MPI_Info_free(&env0);
    if (rank == 0)
        printf("conform OK on %d ranks\n", size);
    return 0;
}
