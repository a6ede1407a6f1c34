/* ring: every rank says where it runs, a token goes once around all ranks, and rank 0
 * times an 8-byte ping-pong with the last rank. Plain standard MPI, for comparing MPIs
 * on the same testbed (docs/testbed.md). */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    printf("rank %d of %d on %s\n", rank, size, host);
    fflush(stdout);

    int token = 0;
    if (size > 1) {
        if (rank != 0)
            MPI_Recv(&token, 1, MPI_INT, rank - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        token += rank;
        MPI_Send(&token, 1, MPI_INT, (rank + 1) % size, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Recv(&token, 1, MPI_INT, size - 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            printf("ring of %d ranks: token came back with %d (expected %d)\n", size, token,
                   size * (size - 1) / 2);
        }
        const int iters = 1000, peer = size - 1;
        char buf[8] = {0};
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters && (rank == 0 || rank == peer); i++) {
            if (rank == 0) {
                MPI_Send(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, 8, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
        }
        if (rank == 0)
            printf("8 B round trip rank 0 <-> rank %d: %.1f us\n", peer,
                   (MPI_Wtime() - t0) / iters * 1e6);
    }
    MPI_Finalize();
    return 0;
}
