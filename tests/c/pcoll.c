/* Persistent collectives (MPI-4): each request is made once and started several times,
 * with new data each round, alone (MPI_Start) and together (MPI_Startall); the results are
 * those of the blocking collectives. The count and displacement arrays are freed after
 * init, as mpi4py's temporaries are. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int bc[4], mine[2], sum[2], all[64], gathered[64];
    int *counts = malloc(size * sizeof(int)), *displs = malloc(size * sizeof(int));
    MPI_Request req[5];
    CHECK_OK(MPI_Bcast_init(bc, 4, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &req[0]));
    CHECK_OK(MPI_Allreduce_init(mine, sum, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &req[1]));
    CHECK_OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &req[2]));
    for (int r = 0; r < size; r++) {
        counts[r] = 1;
        displs[r] = size - 1 - r;
    }
    CHECK_OK(MPI_Allgatherv_init(&mine[0], 1, MPI_INT, gathered, counts, displs, MPI_INT, MPI_COMM_WORLD,
                                 MPI_INFO_NULL, &req[3]));
    for (int r = 0; r < size; r++)
        counts[r] = displs[r] = -99;
    free(counts);
    free(displs);
    CHECK_OK(MPI_Alltoall_init(all, 1, MPI_INT, all + 32, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &req[4]));
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 4; i++)
            bc[i] = rank == size - 1 ? 100 * round + i : -1;
        mine[0] = rank + round;
        mine[1] = 2 * rank;
        for (int r = 0; r < size; r++)
            all[r] = 1000 * round + 10 * rank + r;
        if (round % 2) {
            CHECK_OK(MPI_Startall(5, req));
            CHECK_OK(MPI_Waitall(5, req, MPI_STATUSES_IGNORE));
        } else {
            for (int i = 0; i < 5; i++) {
                CHECK_OK(MPI_Start(&req[i]));
                CHECK_OK(MPI_Wait(&req[i], MPI_STATUS_IGNORE));
            }
        }
        for (int i = 0; i < 4; i++)
            CHECK(bc[i] == 100 * round + i);
        CHECK(sum[0] == size * (size - 1) / 2 + size * round && sum[1] == size * (size - 1));
        for (int r = 0; r < size; r++) {
            CHECK(gathered[size - 1 - r] == r + round);
            CHECK(all[32 + r] == 1000 * round + 10 * r + rank);
        }
    }
    for (int i = 0; i < 5; i++) {
        CHECK(req[i] != MPI_REQUEST_NULL); /* persistent: still there after completion */
        CHECK_OK(MPI_Request_free(&req[i]));
    }
    /* Persistent collectives match in the order of their init calls (MPI-4), not of
     * their starts: here ranks start them in opposite orders, each time. */
    int small[2], small_sum[2], big[5], big_max[5];
    MPI_Request two[2];
    CHECK_OK(MPI_Allreduce_init(small, small_sum, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &two[0]));
    CHECK_OK(MPI_Allreduce_init(big, big_max, 5, MPI_INT, MPI_MAX, MPI_COMM_WORLD, MPI_INFO_NULL, &two[1]));
    for (int round = 0; round < 3; round++) {
        small[0] = rank;
        small[1] = round;
        for (int i = 0; i < 5; i++)
            big[i] = rank * 10 + i + round;
        int first = (rank + round) % 2;
        CHECK_OK(MPI_Start(&two[first]));
        CHECK_OK(MPI_Start(&two[1 - first]));
        CHECK_OK(MPI_Wait(&two[1 - first], MPI_STATUS_IGNORE));
        CHECK_OK(MPI_Wait(&two[first], MPI_STATUS_IGNORE));
        CHECK(small_sum[0] == size * (size - 1) / 2 && small_sum[1] == size * round);
        for (int i = 0; i < 5; i++)
            CHECK(big_max[i] == (size - 1) * 10 + i + round);
    }
    CHECK_OK(MPI_Request_free(&two[0]));
    CHECK_OK(MPI_Request_free(&two[1]));
    if (rank == 0)
        printf("pcoll OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
