/* Cartesian topologies: a 2-D grid over the ranks (MPI_Dims_create), periodic in one
 * dimension; coordinates and ranks round-trip; a halo exchange along each dimension with
 * MPI_Cart_shift and MPI_Sendrecv lands each neighbour's rank where the grid says;
 * MPI_Cart_sub gives rows and columns whose sizes and ranks match the grid; ranks beyond
 * a smaller grid get MPI_COMM_NULL; neighbourhood allgather and alltoall (blocking, non-
 * blocking, v) land every neighbour's block where MPI orders it, also where one rank is
 * the neighbour on both sides (periodic dimensions of 1 or 2), and leave the blocks of
 * neighbours off the grid alone; a graph (a ring) and a distributed graph (a chain, given
 * adjacently with weights and by rank 0 alone) with their queries and neighbourhood
 * collectives. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int dims[2] = {0, 0}, periods[2] = {1, 0}, status;
    CHECK_OK(MPI_Dims_create(size, 2, dims));
    MPI_Comm grid;
    CHECK_OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 1, &grid));
    CHECK_OK(MPI_Topo_test(grid, &status));
    CHECK(status == MPI_CART);
    CHECK_OK(MPI_Topo_test(MPI_COMM_WORLD, &status));
    CHECK(status == MPI_UNDEFINED);
    int me, nd, gd[2], gp[2], gc[2], coords[2], back;
    CHECK_OK(MPI_Comm_rank(grid, &me));
    CHECK_OK(MPI_Cartdim_get(grid, &nd));
    CHECK(nd == 2);
    CHECK_OK(MPI_Cart_get(grid, 2, gd, gp, gc));
    CHECK(gd[0] == dims[0] && gd[1] == dims[1] && gp[0] == 1 && gp[1] == 0);
    CHECK_OK(MPI_Cart_coords(grid, me, 2, coords));
    CHECK(coords[0] == gc[0] && coords[1] == gc[1]);
    CHECK(coords[0] == me / dims[1] && coords[1] == me % dims[1]);
    CHECK_OK(MPI_Cart_rank(grid, coords, &back));
    CHECK(back == me);
    /* A halo exchange along each dimension. */
    for (int d = 0; d < 2; d++) {
        int src, dst, got = -7;
        CHECK_OK(MPI_Cart_shift(grid, d, 1, &src, &dst));
        int expect_src[2] = {coords[0], coords[1]};
        expect_src[d] -= 1;
        if (d == 0)
            expect_src[0] = (expect_src[0] + dims[0]) % dims[0]; /* periodic */
        if (expect_src[d] < 0) {
            CHECK(src == MPI_PROC_NULL);
        } else {
            int r;
            CHECK_OK(MPI_Cart_rank(grid, expect_src, &r));
            CHECK(src == r);
        }
        CHECK_OK(MPI_Sendrecv(&me, 1, MPI_INT, dst, d, &got, 1, MPI_INT, src, d, grid, MPI_STATUS_IGNORE));
        CHECK(src == MPI_PROC_NULL ? got == -7 : got == src);
    }
    /* Neighbourhood collectives: neighbours in the order (dim 0 before, after, dim 1
     * before, after). What a neighbour before me sent towards its "after" side is mine. */
    int nb[4];
    for (int d = 0; d < 2; d++)
        CHECK_OK(MPI_Cart_shift(grid, d, 1, &nb[2 * d], &nb[2 * d + 1]));
    int gathered[4] = {-1, -1, -1, -1};
    CHECK_OK(MPI_Neighbor_allgather(&me, 1, MPI_INT, gathered, 1, MPI_INT, grid));
    for (int i = 0; i < 4; i++)
        CHECK(gathered[i] == (nb[i] == MPI_PROC_NULL ? -1 : nb[i]));
    int out[4], in[4] = {-1, -1, -1, -1};
    for (int i = 0; i < 4; i++)
        out[i] = 10 * me + i;
    MPI_Request req;
    CHECK_OK(MPI_Ineighbor_alltoall(out, 1, MPI_INT, in, 1, MPI_INT, grid, &req));
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE));
    for (int i = 0; i < 4; i++)
        CHECK(in[i] == (nb[i] == MPI_PROC_NULL ? -1 : 10 * nb[i] + (i ^ 1)));
    /* v form: neighbour i gets i + 1 ints, at displacements in reverse. */
    int vout[10], vin[10], counts[4], displs[4], at = 0;
    for (int i = 3; i >= 0; i--) {
        counts[i] = i + 1;
        displs[i] = at;
        at += i + 1;
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < counts[i]; j++)
            vout[displs[i] + j] = 100 * me + 10 * i + j;
    for (int i = 0; i < 10; i++)
        vin[i] = -1;
    /* What arrives from neighbour i is what it sent towards me: its block i ^ 1, which has
     * (i ^ 1) + 1 ints; receive what each sends. */
    int rcounts[4], rdispls[4];
    at = 0;
    for (int i = 0; i < 4; i++) {
        rcounts[i] = (i ^ 1) + 1;
        rdispls[i] = at;
        at += rcounts[i];
    }
    CHECK_OK(MPI_Neighbor_alltoallv(vout, counts, displs, MPI_INT, vin, rcounts, rdispls, MPI_INT, grid));
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < rcounts[i]; j++)
            CHECK(vin[rdispls[i] + j] == (nb[i] == MPI_PROC_NULL ? -1 : 100 * nb[i] + 10 * (i ^ 1) + j));
    /* Rows: the second dimension kept. */
    int keep[2] = {0, 1}, rsize, rrank, rnd;
    MPI_Comm row;
    CHECK_OK(MPI_Cart_sub(grid, keep, &row));
    CHECK_OK(MPI_Comm_size(row, &rsize));
    CHECK_OK(MPI_Comm_rank(row, &rrank));
    CHECK_OK(MPI_Cartdim_get(row, &rnd));
    CHECK(rsize == dims[1] && rrank == coords[1] && rnd == 1);
    int sum = 0;
    CHECK_OK(MPI_Allreduce(&me, &sum, 1, MPI_INT, MPI_SUM, row));
    CHECK(sum == coords[0] * dims[1] * dims[1] + dims[1] * (dims[1] - 1) / 2);
    CHECK_OK(MPI_Comm_free(&row));
    /* A duplicate keeps the topology. */
    MPI_Comm dup;
    CHECK_OK(MPI_Comm_dup(grid, &dup));
    CHECK_OK(MPI_Topo_test(dup, &status));
    CHECK(status == MPI_CART);
    CHECK_OK(MPI_Comm_free(&dup));
    CHECK_OK(MPI_Comm_free(&grid));
    /* A grid smaller than the job leaves the rest out. */
    int one[1] = {1}, nonperiodic[1] = {0}, newrank;
    MPI_Comm small;
    CHECK_OK(MPI_Cart_create(MPI_COMM_WORLD, 1, one, nonperiodic, 0, &small));
    CHECK(rank == 0 ? small != MPI_COMM_NULL : small == MPI_COMM_NULL);
    CHECK_OK(MPI_Cart_map(MPI_COMM_WORLD, 1, one, nonperiodic, &newrank));
    CHECK(rank == 0 ? newrank == 0 : newrank == MPI_UNDEFINED);
    if (small != MPI_COMM_NULL)
        CHECK_OK(MPI_Comm_free(&small));
    /* A graph: a ring given whole (rank i's neighbours i - 1 and i + 1). */
    int *index = malloc(size * sizeof(int)), *edges = malloc(2 * size * sizeof(int));
    for (int i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + size - 1) % size;
        edges[2 * i + 1] = (i + 1) % size;
    }
    MPI_Comm ring;
    CHECK_OK(MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &ring));
    CHECK_OK(MPI_Topo_test(ring, &status));
    CHECK(status == MPI_GRAPH);
    int nnodes, nedges, nn, ring_nb[2], got_nb[2] = {-1, -1};
    CHECK_OK(MPI_Graphdims_get(ring, &nnodes, &nedges));
    CHECK(nnodes == size && nedges == 2 * size);
    CHECK_OK(MPI_Graph_neighbors_count(ring, rank, &nn));
    CHECK(nn == 2);
    CHECK_OK(MPI_Graph_neighbors(ring, rank, 2, ring_nb));
    CHECK(ring_nb[0] == (rank + size - 1) % size && ring_nb[1] == (rank + 1) % size);
    CHECK_OK(MPI_Neighbor_allgather(&rank, 1, MPI_INT, got_nb, 1, MPI_INT, ring));
    CHECK(got_nb[0] == ring_nb[0] && got_nb[1] == ring_nb[1]);
    CHECK_OK(MPI_Comm_free(&ring));
    free(index);
    free(edges);
    /* A distributed graph: each rank sends to the next and hears from the one before. */
    int prev = (rank + size - 1) % size, next = (rank + 1) % size, w_in = 7, w_out = 9;
    MPI_Comm chain;
    CHECK_OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &prev, &w_in, 1, &next, &w_out, MPI_INFO_NULL, 0,
                                            &chain));
    CHECK_OK(MPI_Topo_test(chain, &status));
    CHECK(status == MPI_DIST_GRAPH);
    int indeg, outdeg, weighted, s1, sw1, d1, dw1, token = -1;
    CHECK_OK(MPI_Dist_graph_neighbors_count(chain, &indeg, &outdeg, &weighted));
    CHECK(indeg == 1 && outdeg == 1 && weighted);
    CHECK_OK(MPI_Dist_graph_neighbors(chain, 1, &s1, &sw1, 1, &d1, &dw1));
    CHECK(s1 == prev && d1 == next && sw1 == 7 && dw1 == 9);
    int mine_out = 1000 + rank;
    CHECK_OK(MPI_Neighbor_alltoall(&mine_out, 1, MPI_INT, &token, 1, MPI_INT, chain));
    CHECK(token == 1000 + prev);
    /* The w form: a type and a byte displacement (MPI_Aint) per neighbour. */
    double wout[2] = {0.5 + rank, -1}, win[2] = {-1, -1};
    int one_count = 1;
    MPI_Aint at_second = sizeof(double);
    MPI_Datatype dbl = MPI_DOUBLE;
    CHECK_OK(MPI_Neighbor_alltoallw(wout, &one_count, &(MPI_Aint){0}, &dbl, win, &one_count, &at_second, &dbl,
                                    chain));
    CHECK(win[0] == -1 && win[1] == 0.5 + prev);
    CHECK_OK(MPI_Comm_free(&chain));
    /* The same chain given by rank 0 alone (MPI_Dist_graph_create), unweighted. */
    int *srcs = malloc(size * sizeof(int)), *degs = malloc(size * sizeof(int)), *dsts = malloc(size * sizeof(int));
    for (int i = 0; i < size; i++) {
        srcs[i] = i;
        degs[i] = 1;
        dsts[i] = (i + 1) % size;
    }
    CHECK_OK(MPI_Dist_graph_create(MPI_COMM_WORLD, rank == 0 ? size : 0, srcs, degs, dsts, MPI_UNWEIGHTED,
                                   MPI_INFO_NULL, 0, &chain));
    CHECK_OK(MPI_Dist_graph_neighbors_count(chain, &indeg, &outdeg, &weighted));
    CHECK(indeg == 1 && outdeg == 1 && !weighted);
    CHECK_OK(MPI_Dist_graph_neighbors(chain, 1, &s1, MPI_UNWEIGHTED, 1, &d1, MPI_UNWEIGHTED));
    CHECK(s1 == prev && d1 == next);
    token = -1;
    CHECK_OK(MPI_Neighbor_allgather(&mine_out, 1, MPI_INT, &token, 1, MPI_INT, chain));
    CHECK(token == 1000 + prev);
    CHECK_OK(MPI_Comm_free(&chain));
    free(srcs);
    free(degs);
    free(dsts);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("topo OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
