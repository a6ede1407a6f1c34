/* Intercommunicators: MPI_COMM_WORLD's even and odd ranks as two groups. Creation, the
 * remote group, point-to-point between the groups (ranks and statuses name the remote
 * group), barrier, bcast (MPI_ROOT / MPI_PROC_NULL / remote root), allreduce and
 * allgather across, dup, split, merge (every collective: intercoll.c). */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int wrank, wsize;
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (wsize < 2) {
        printf("inter OK on %d ranks\n", wsize);
        MPI_Finalize();
        return 0;
    }
    int odd = wrank % 2, nodd = wsize / 2, neven = wsize - nodd;
    MPI_Comm local, inter;
    CHECK_OK(MPI_Comm_split(MPI_COMM_WORLD, odd, wrank, &local));
    int lrank, lsize, flag, rsize;
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    /* The leaders are world ranks 0 (evens) and 1 (odds). */
    CHECK_OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, odd ? 0 : 1, 99, &inter));
    CHECK_OK(MPI_Comm_test_inter(inter, &flag));
    CHECK(flag == 1);
    CHECK_OK(MPI_Comm_test_inter(local, &flag));
    CHECK(flag == 0);
    CHECK_OK(MPI_Comm_remote_size(inter, &rsize));
    CHECK(rsize == (odd ? neven : nodd));
    int size, rank;
    MPI_Comm_size(inter, &size);
    MPI_Comm_rank(inter, &rank);
    CHECK(size == lsize && rank == lrank && rank == wrank / 2);
    MPI_Group remote, world_group;
    CHECK_OK(MPI_Comm_remote_group(inter, &remote));
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    for (int r = 0; r < rsize; r++) {
        int w;
        MPI_Group_translate_ranks(remote, 1, &r, world_group, &w);
        CHECK(w == 2 * r + !odd);
    }

    /* Point to point: even rank 0 writes to every odd rank; they answer. */
    if (!odd && rank == 0) {
        for (int r = 0; r < rsize; r++) {
            int v = 1000 + r;
            CHECK_OK(MPI_Send(&v, 1, MPI_INT, r, 5, inter));
        }
        for (int i = 0; i < rsize; i++) {
            int v;
            MPI_Status st;
            CHECK_OK(MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 6, inter, &st));
            CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < rsize && v == 2 * st.MPI_SOURCE + 1);
        }
    } else if (odd) {
        int v;
        MPI_Status st;
        CHECK_OK(MPI_Recv(&v, 1, MPI_INT, 0, 5, inter, &st));
        CHECK(v == 1000 + rank && st.MPI_SOURCE == 0 && st.MPI_TAG == 5);
        CHECK_OK(MPI_Send(&wrank, 1, MPI_INT, 0, 6, inter));
    }
    int bad = 0;
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    CHECK(MPI_Send(&bad, 1, MPI_INT, rsize, 0, inter) != MPI_SUCCESS);

    CHECK_OK(MPI_Barrier(inter));

    /* Bcast from even rank 0 to the odds, then from the last odd rank to the evens. */
    int data[3] = {-1, -1, -1};
    if (!odd && rank == 0)
        data[0] = 7, data[1] = 8, data[2] = 9;
    int root = odd ? 0 : (rank == 0 ? MPI_ROOT : MPI_PROC_NULL);
    CHECK_OK(MPI_Bcast(data, 3, MPI_INT, root, inter));
    if (odd)
        CHECK(data[0] == 7 && data[1] == 8 && data[2] == 9);
    else if (rank != 0)
        CHECK(data[0] == -1);
    double x = odd ? 2.5 : -1;
    root = odd ? (rank == nodd - 1 ? MPI_ROOT : MPI_PROC_NULL) : nodd - 1;
    CHECK_OK(MPI_Bcast(&x, 1, MPI_DOUBLE, root, inter));
    CHECK(x == 2.5);

    /* Allreduce: each group gets the sum of the other group's world ranks. */
    int sum = -1, even_sum = 0, odd_sum = 0;
    for (int w = 0; w < wsize; w++)
        *(w % 2 ? &odd_sum : &even_sum) += w;
    CHECK_OK(MPI_Allreduce(&wrank, &sum, 1, MPI_INT, MPI_SUM, inter));
    CHECK(sum == (odd ? even_sum : odd_sum));

    /* Allgather: the other group's world ranks in remote rank order. */
    int *all = malloc(rsize * sizeof(int));
    CHECK_OK(MPI_Allgather(&wrank, 1, MPI_INT, all, 1, MPI_INT, inter));
    for (int r = 0; r < rsize; r++)
        CHECK(all[r] == 2 * r + !odd);
    free(all);

    /* A duplicate is an intercommunicator with the same groups and its own context. */
    MPI_Comm dup;
    CHECK_OK(MPI_Comm_dup(inter, &dup));
    CHECK_OK(MPI_Comm_test_inter(dup, &flag));
    CHECK(flag == 1);
    CHECK_OK(MPI_Comm_remote_size(dup, &flag));
    CHECK(flag == rsize);
    int token = wrank, got = -1;
    /* Rank i of each group swaps with rank i of the other, where both exist. */
    if (rank < rsize)
        CHECK_OK(MPI_Sendrecv(&token, 1, MPI_INT, rank, 1, &got, 1, MPI_INT, rank, 1, dup, MPI_STATUS_IGNORE));
    if (rank < rsize)
        CHECK(got == 2 * rank + !odd);
    CHECK_OK(MPI_Comm_free(&dup));

    /* Split: each group by local rank parity, ordered backwards; a part meets the other
     * group's part of its color, or gets MPI_COMM_NULL when that part is empty. */
    MPI_Comm part;
    int color = rank % 2;
    CHECK_OK(MPI_Comm_split(inter, color, -rank, &part));
    int same_local = (lsize - color + 1) / 2, same_remote = (rsize - color + 1) / 2;
    if (same_remote == 0) {
        CHECK(part == MPI_COMM_NULL);
    } else {
        int prank, psize, prsize, psum = -1, want = 0;
        MPI_Comm_rank(part, &prank);
        MPI_Comm_size(part, &psize);
        MPI_Comm_remote_size(part, &prsize);
        CHECK(psize == same_local && prsize == same_remote && prank == same_local - 1 - rank / 2);
        for (int r = color; r < rsize; r += 2)
            want += 2 * r + !odd;
        CHECK_OK(MPI_Allreduce(&wrank, &psum, 1, MPI_INT, MPI_SUM, part));
        CHECK(psum == want);
        CHECK_OK(MPI_Comm_free(&part));
    }

    /* Create (MPI-2.2): each side's group, backwards and without its last member where
     * it has more than one, meets the other side's; those left out get MPI_COMM_NULL. */
    MPI_Group mine, backwards;
    CHECK_OK(MPI_Comm_group(inter, &mine));
    int kept = lsize > 1 ? lsize - 1 : 1, rkept = rsize > 1 ? rsize - 1 : 1;
    int *order = malloc(lsize * sizeof(int));
    for (int i = 0; i < kept; i++)
        order[i] = kept - 1 - i;
    CHECK_OK(MPI_Group_incl(mine, kept, order, &backwards));
    free(order);
    MPI_Comm created;
    CHECK_OK(MPI_Comm_create(inter, backwards, &created));
    if (rank >= kept) {
        CHECK(created == MPI_COMM_NULL);
    } else {
        int crank, csize, crsize, csum = -1, want = 0;
        MPI_Comm_rank(created, &crank);
        MPI_Comm_size(created, &csize);
        MPI_Comm_remote_size(created, &crsize);
        CHECK(csize == kept && crsize == rkept && crank == kept - 1 - rank);
        for (int r = 0; r < rkept; r++)
            want += 2 * r + !odd;
        CHECK_OK(MPI_Allreduce(&wrank, &csum, 1, MPI_INT, MPI_SUM, created));
        CHECK(csum == want);
        /* Remote rank 0 is the other side's last kept member. */
        if (crank == 0) {
            int from = -1;
            CHECK_OK(MPI_Sendrecv(&wrank, 1, MPI_INT, 0, 4, &from, 1, MPI_INT, 0, 4, created, MPI_STATUS_IGNORE));
            CHECK(from == 2 * (rkept - 1) + !odd);
        }
        CHECK_OK(MPI_Comm_free(&created));
    }
    /* One side's group empty: nobody gets a communicator. */
    CHECK_OK(MPI_Comm_create(inter, odd ? MPI_GROUP_EMPTY : mine, &created));
    CHECK(created == MPI_COMM_NULL);
    MPI_Group_free(&backwards);
    MPI_Group_free(&mine);

    /* Idup: completes in the background while the groups swap point-to-point. */
    MPI_Comm idupped;
    MPI_Request ireq;
    CHECK_OK(MPI_Comm_idup(inter, &idupped, &ireq));
    got = -1;
    if (rank < rsize)
        CHECK_OK(MPI_Sendrecv(&token, 1, MPI_INT, rank, 2, &got, 1, MPI_INT, rank, 2, inter, MPI_STATUS_IGNORE));
    CHECK_OK(MPI_Wait(&ireq, MPI_STATUS_IGNORE));
    if (rank < rsize)
        CHECK(got == 2 * rank + !odd);
    CHECK_OK(MPI_Comm_test_inter(idupped, &flag));
    CHECK(flag == 1);
    CHECK_OK(MPI_Comm_remote_size(idupped, &flag));
    CHECK(flag == rsize);
    int isum = -1;
    CHECK_OK(MPI_Allreduce(&wrank, &isum, 1, MPI_INT, MPI_SUM, idupped));
    CHECK(isum == (odd ? even_sum : odd_sum));
    CHECK_OK(MPI_Comm_free(&idupped));

    /* MPI-4: from two groups, without a parent communicator. */
    MPI_Group evens, odds;
    int *ranks = malloc(wsize * sizeof(int));
    for (int i = 0; i < neven; i++)
        ranks[i] = 2 * i;
    MPI_Group_incl(world_group, neven, ranks, &evens);
    for (int i = 0; i < nodd; i++)
        ranks[i] = 2 * i + 1;
    MPI_Group_incl(world_group, nodd, ranks, &odds);
    free(ranks);
    MPI_Comm fromgroups;
    CHECK_OK(MPI_Intercomm_create_from_groups(odd ? odds : evens, 0, odd ? evens : odds, 0, "inter.c",
                                              MPI_INFO_NULL, MPI_ERRORS_RETURN, &fromgroups));
    CHECK_OK(MPI_Comm_remote_size(fromgroups, &flag));
    CHECK(flag == rsize);
    CHECK_OK(MPI_Allreduce(&wrank, &sum, 1, MPI_INT, MPI_SUM, fromgroups));
    CHECK(sum == (odd ? even_sum : odd_sum));
    CHECK_OK(MPI_Comm_free(&fromgroups));
    MPI_Group_free(&evens);
    MPI_Group_free(&odds);

    /* Merge: the evens (high = 0) first, then the odds. */
    MPI_Comm merged;
    CHECK_OK(MPI_Intercomm_merge(inter, odd, &merged));
    int mrank, msize;
    MPI_Comm_rank(merged, &mrank);
    MPI_Comm_size(merged, &msize);
    CHECK(msize == wsize && mrank == (odd ? neven + wrank / 2 : wrank / 2));
    CHECK_OK(MPI_Comm_test_inter(merged, &flag));
    CHECK(flag == 0);
    int total = -1;
    CHECK_OK(MPI_Allreduce(&wrank, &total, 1, MPI_INT, MPI_SUM, merged));
    CHECK(total == even_sum + odd_sum);

    CHECK_OK(MPI_Comm_free(&merged));
    CHECK_OK(MPI_Comm_free(&inter));
    CHECK_OK(MPI_Comm_free(&local));
    MPI_Group_free(&remote);
    MPI_Group_free(&world_group);
    MPI_Barrier(MPI_COMM_WORLD);
    if (wrank == 0)
        printf("inter OK on %d ranks\n", wsize);
    MPI_Finalize();
    return 0;
}
