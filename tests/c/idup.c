/* MPI_Comm_idup: duplicates that complete in the background while the program does other
 * communication, several in flight at once on one parent and on several, started in
 * different orders relative to blocking duplications at different ranks, and advanced by
 * a blocking receive that waits for another rank's idup to finish. Each duplicate has
 * its own context (no message crosses) and keeps the parent's attributes. */
#include "check.h"

#define N 12

static int copies;

static int count_copy(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag) {
    (void)c, (void)k, (void)extra;
    copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static void check_dup(MPI_Comm parent, MPI_Comm dup) {
    int cmp, rank, size;
    CHECK_OK(MPI_Comm_compare(parent, dup, &cmp));
    CHECK(cmp == MPI_CONGRUENT);
    MPI_Comm_rank(dup, &rank);
    MPI_Comm_size(dup, &size);
    /* Same tag on the parent and on the duplicate: each receive gets its own. */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size, a = -1, b = -1;
    MPI_Request r[4];
    CHECK_OK(MPI_Irecv(&a, 1, MPI_INT, prev, 3, dup, &r[0]));
    CHECK_OK(MPI_Irecv(&b, 1, MPI_INT, prev, 3, parent, &r[1]));
    int one = 1, two = 2;
    CHECK_OK(MPI_Isend(&two, 1, MPI_INT, next, 3, parent, &r[2]));
    CHECK_OK(MPI_Isend(&one, 1, MPI_INT, next, 3, dup, &r[3]));
    CHECK_OK(MPI_Waitall(4, r, MPI_STATUSES_IGNORE));
    CHECK(a == 1 && b == 2);
    int sum;
    CHECK_OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, dup));
    CHECK(sum == size);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* 1. One idup with an attribute to copy, overlapped by collectives on the parent. */
    int key;
    CHECK_OK(MPI_Comm_create_keyval(count_copy, MPI_COMM_NULL_DELETE_FN, &key, NULL));
    CHECK_OK(MPI_Comm_set_attr(MPI_COMM_WORLD, key, (void *)42));
    MPI_Comm d;
    MPI_Request req;
    CHECK_OK(MPI_Comm_idup(MPI_COMM_WORLD, &d, &req));
    int x = rank, total;
    CHECK_OK(MPI_Allreduce(&x, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(total == size * (size - 1) / 2);
    MPI_Request b;
    CHECK_OK(MPI_Ibarrier(MPI_COMM_WORLD, &b));
    CHECK_OK(MPI_Wait(&b, MPI_STATUS_IGNORE));
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    void *v;
    int flag;
    CHECK_OK(MPI_Comm_get_attr(d, key, &v, &flag));
    CHECK(flag && v == (void *)42 && copies == 1);
    check_dup(MPI_COMM_WORLD, d);

    /* 2. N idups in flight at once, of the world and of the first duplicate, completed
     * last first; with_info too. */
    MPI_Comm many[N];
    MPI_Request reqs[N];
    for (int i = 0; i < N; i++) {
        MPI_Comm parent = i % 2 ? d : MPI_COMM_WORLD;
        if (i % 3 == 0)
            CHECK_OK(MPI_Comm_idup_with_info(parent, MPI_INFO_NULL, &many[i], &reqs[i]));
        else
            CHECK_OK(MPI_Comm_idup(parent, &many[i], &reqs[i]));
    }
    for (int i = N - 1; i >= 0; i--)
        CHECK_OK(MPI_Wait(&reqs[i], MPI_STATUS_IGNORE));
    for (int i = 0; i < N; i++)
        check_dup(i % 2 ? d : MPI_COMM_WORLD, many[i]);
    for (int i = 0; i < N; i++)
        MPI_Comm_free(&many[i]);

    /* 3. Orders that differ between ranks: even ranks start the idup of the world, then
     * duplicate their pair's communicator (blocking); odd ranks the other way round. */
    MPI_Comm pair, pdup, wdup;
    CHECK_OK(MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &pair));
    if (rank % 2 == 0) {
        CHECK_OK(MPI_Comm_idup(MPI_COMM_WORLD, &wdup, &req));
        CHECK_OK(MPI_Comm_dup(pair, &pdup));
    } else {
        CHECK_OK(MPI_Comm_dup(pair, &pdup));
        CHECK_OK(MPI_Comm_idup(MPI_COMM_WORLD, &wdup, &req));
    }
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    check_dup(MPI_COMM_WORLD, wdup);
    check_dup(pair, pdup);
    MPI_Comm_free(&pdup);
    MPI_Comm_free(&wdup);
    MPI_Comm_free(&pair);

    /* 4. Progress from elsewhere: rank 0 waits in a receive for the last rank, which sends
     * only once its own idup (needing rank 0's part) completed. */
    CHECK_OK(MPI_Comm_idup(MPI_COMM_WORLD, &wdup, &req));
    if (size > 1 && rank == 0) {
        int got;
        CHECK_OK(MPI_Recv(&got, 1, MPI_INT, size - 1, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(got == 8);
        CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    } else {
        CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
        int eight = 8;
        if (size > 1 && rank == size - 1)
            CHECK_OK(MPI_Send(&eight, 1, MPI_INT, 0, 8, MPI_COMM_WORLD));
    }
    check_dup(MPI_COMM_WORLD, wdup);
    MPI_Comm_free(&wdup);

    /* 5. Tested rather than waited for. */
    CHECK_OK(MPI_Comm_idup(MPI_COMM_WORLD, &wdup, &req));
    int done = 0;
    while (!done)
        CHECK_OK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    check_dup(MPI_COMM_WORLD, wdup);
    MPI_Comm_free(&wdup);

    MPI_Comm_free(&d);
    MPI_Comm_delete_attr(MPI_COMM_WORLD, key);
    MPI_Comm_free_keyval(&key);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("idup OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
