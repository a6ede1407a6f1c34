/* Communicators, groups, attributes and error handlers through the standard ABI. */
#include <stdint.h>
#include <pthread.h>

#include "check.h"

static int copies = 0, deletes = 0;
static int copy_fn(MPI_Comm c, int kv, void *extra, void *in, void *out, int *flag) {
    (void)c; (void)kv;
    CHECK(extra == (void *)&copies);
    copies++;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}
static int delete_fn(MPI_Comm c, int kv, void *val, void *extra) {
    (void)kv; (void)val; (void)extra;
    CHECK(c != MPI_COMM_NULL);
    deletes++;
    return MPI_SUCCESS;
}
static int handled = 0, handled_code = 0;
static void on_error(MPI_Comm *c, int *code, ...) {
    CHECK(*c != MPI_COMM_NULL);
    handled++;
    handled_code = *code;
}

/* MPI_Init gives MPI_THREAD_FUNNELED: MPI's state belongs to the thread that initialized it. */
static void *call_from_another_thread(void *rc) {
    int r;
    *(int *)rc = MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return NULL;
}

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);

    /* Split into halves ordered backwards by key; each half sums its world ranks. */
    MPI_Comm half;
    CHECK_OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half));
    int hr, hs;
    MPI_Comm_rank(half, &hr);
    MPI_Comm_size(half, &hs);
    CHECK(hs == (p + 1 - rank % 2) / 2);
    int sum = 0;
    CHECK_OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half));
    int expect = 0;
    for (int r = rank % 2; r < p; r += 2) expect += r;
    CHECK(sum == expect);
    int larger = 0; /* key -rank: the highest world rank is rank 0 of the half */
    for (int r = rank % 2; r < p; r += 2) larger += r > rank;
    CHECK(hr == larger);
    int cmp;
    CHECK_OK(MPI_Comm_compare(half, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == (p <= 1 ? MPI_CONGRUENT : MPI_UNEQUAL));

    /* An UNDEFINED color gives MPI_COMM_NULL. */
    MPI_Comm none;
    CHECK_OK(MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : MPI_UNDEFINED, 0, &none));
    CHECK((rank == 0) == (none != MPI_COMM_NULL));
    if (none != MPI_COMM_NULL) CHECK_OK(MPI_Comm_free(&none));

    /* Groups: the even ranks, created as a communicator. */
    MPI_Group world, evens;
    CHECK_OK(MPI_Comm_group(MPI_COMM_WORLD, &world));
    int ranges[1][3] = {{0, p - 1, 2}};
    CHECK_OK(MPI_Group_range_incl(world, 1, ranges, &evens));
    int gs, gr;
    MPI_Group_size(evens, &gs);
    MPI_Group_rank(evens, &gr);
    CHECK(gs == (p + 1) / 2 && gr == (rank % 2 ? MPI_UNDEFINED : rank / 2));
    int q[2] = {0, gs - 1}, t[2];
    CHECK_OK(MPI_Group_translate_ranks(evens, 2, q, world, t));
    CHECK(t[0] == 0 && t[1] == 2 * (gs - 1));
    MPI_Comm even_comm;
    CHECK_OK(MPI_Comm_create(MPI_COMM_WORLD, evens, &even_comm));
    CHECK((rank % 2 == 0) == (even_comm != MPI_COMM_NULL));
    if (even_comm != MPI_COMM_NULL) {
        MPI_Group g2;
        MPI_Comm_group(even_comm, &g2);
        CHECK_OK(MPI_Group_compare(g2, evens, &cmp));
        CHECK(cmp == MPI_IDENT);
        MPI_Group_free(&g2);
        CHECK_OK(MPI_Comm_free(&even_comm));
        CHECK(even_comm == MPI_COMM_NULL);
    }
    /* The same group through Comm_create_group: only the even ranks call it. */
    if (rank % 2 == 0) {
        MPI_Comm by_group;
        CHECK_OK(MPI_Comm_create_group(MPI_COMM_WORLD, evens, 7, &by_group));
        int bs, sum_even = 0, expect_even = 0;
        MPI_Comm_size(by_group, &bs);
        CHECK(bs == (p + 1) / 2);
        CHECK_OK(MPI_Allreduce(&rank, &sum_even, 1, MPI_INT, MPI_SUM, by_group));
        for (int r = 0; r < p; r += 2) expect_even += r;
        CHECK(sum_even == expect_even);
        CHECK_OK(MPI_Comm_free(&by_group));
    } else {
        /* Meanwhile the odd ranks talk on the parent communicator. */
        MPI_Comm not_member;
        CHECK_OK(MPI_Comm_create_group(MPI_COMM_WORLD, evens, 7, &not_member));
        CHECK(not_member == MPI_COMM_NULL);
    }
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    MPI_Group_free(&evens);
    MPI_Group_free(&world);

    /* Attributes: copied on dup, deleted on free; TAG_UB is predefined. */
    int kv;
    CHECK_OK(MPI_Comm_create_keyval(copy_fn, delete_fn, &kv, &copies));
    static char base[4];
    CHECK_OK(MPI_Comm_set_attr(half, kv, base));
    MPI_Comm d;
    CHECK_OK(MPI_Comm_dup(half, &d));
    CHECK(copies == 1);
    void *val;
    int flag;
    CHECK_OK(MPI_Comm_get_attr(d, kv, &val, &flag));
    CHECK(flag && val == base + 1);
    CHECK_OK(MPI_Comm_free(&d));
    CHECK(deletes == 1);
    CHECK_OK(MPI_Comm_delete_attr(half, kv));
    CHECK(deletes == 2);
    CHECK_OK(MPI_Comm_get_attr(half, kv, &val, &flag));
    CHECK(!flag);
    CHECK_OK(MPI_Comm_free_keyval(&kv));
    CHECK(kv == MPI_KEYVAL_INVALID);
    int *tag_ub;
    CHECK_OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag));
    CHECK(flag && *tag_ub >= 32767);

    /* Names. */
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    CHECK_OK(MPI_Comm_get_name(MPI_COMM_WORLD, name, &len));
    CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14);
    CHECK_OK(MPI_Comm_set_name(half, "half"));
    CHECK_OK(MPI_Comm_get_name(half, name, &len));
    CHECK(strcmp(name, "half") == 0);

    /* A user error handler sees the code; the call returns it. */
    MPI_Errhandler eh;
    CHECK_OK(MPI_Comm_create_errhandler(on_error, &eh));
    CHECK_OK(MPI_Comm_set_errhandler(half, eh));
    int rc = MPI_Send(&rank, 1, MPI_INT, 1 << 20, 0, half);
    int cls;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK && handled == 1 && handled_code == rc);
    MPI_Errhandler got;
    CHECK_OK(MPI_Comm_get_errhandler(half, &got));
    CHECK(got == eh);
    CHECK_OK(MPI_Errhandler_free(&eh));

    /* Error classes and codes of the program's own. */
    int my_class, my_code, got_class, *last;
    CHECK_OK(MPI_Add_error_class(&my_class));
    CHECK(my_class > MPI_ERR_ABI);
    CHECK_OK(MPI_Add_error_code(my_class, &my_code));
    CHECK_OK(MPI_Add_error_string(my_code, "the widget broke"));
    CHECK_OK(MPI_Error_class(my_code, &got_class));
    CHECK(got_class == my_class);
    char msg[MPI_MAX_ERROR_STRING];
    CHECK_OK(MPI_Error_string(my_code, msg, &len));
    CHECK(strcmp(msg, "the widget broke") == 0);
    CHECK_OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &last, &flag));
    CHECK(flag && *last >= my_code);
    /* MPI-4.1 removal: the string, then the code, then the class. */
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    CHECK(MPI_Remove_error_class(my_class) != MPI_SUCCESS); /* it still has a code */
    CHECK(MPI_Remove_error_code(my_code) != MPI_SUCCESS);   /* it still has a string */
    CHECK_OK(MPI_Remove_error_string(my_code));
    CHECK_OK(MPI_Error_string(my_code, msg, &len));
    CHECK(strcmp(msg, "the widget broke") != 0);
    CHECK_OK(MPI_Remove_error_code(my_code));
    CHECK(MPI_Remove_error_code(my_code) != MPI_SUCCESS); /* gone */
    CHECK_OK(MPI_Remove_error_class(my_class));
    CHECK(MPI_Remove_error_class(MPI_ERR_ARG) != MPI_SUCCESS); /* predefined */
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));

    /* MPI_Alloc_mem: memory aligned as malloc's, kept until MPI_Free_mem, which refuses
     * memory it did not give (MPI_ERR_BASE) instead of handing it to free(). */
    double *block = NULL;
    char *bytes = NULL;
    CHECK_OK(MPI_Alloc_mem(1000 * sizeof(double), MPI_INFO_NULL, &block));
    CHECK_OK(MPI_Alloc_mem(0, MPI_INFO_NULL, &bytes));
    CHECK(block != NULL && bytes != NULL && ((uintptr_t)block % 16) == 0);
    for (int i = 0; i < 1000; i++) block[i] = i * 0.5;
    CHECK(block[999] == 499.5);
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    int mine = 0, mem_class = 0;
    CHECK_OK(MPI_Error_class(MPI_Free_mem(&mine), &mem_class));
    CHECK(mem_class == MPI_ERR_BASE);
    CHECK_OK(MPI_Free_mem(block));
    CHECK_OK(MPI_Error_class(MPI_Free_mem(block), &mem_class)); /* freed already */
    CHECK(mem_class == MPI_ERR_BASE);
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
    CHECK_OK(MPI_Free_mem(bytes));

    /* MPI_Comm_create_from_group: no parent communicator. The even ranks make one while
     * the odd ones go on to the next, over all ranks, with another string tag. */
    MPI_Group world_group, even_group;
    CHECK_OK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    int even_ranks[64], n_even = 0;
    for (int r = 0; r < p && n_even < 64; r += 2) even_ranks[n_even++] = r;
    CHECK_OK(MPI_Group_incl(world_group, n_even, even_ranks, &even_group));
    MPI_Comm from_group = MPI_COMM_NULL;
    if (rank % 2 == 0) {
        CHECK_OK(MPI_Comm_create_from_group(even_group, "pontoon.test.evens", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                            &from_group));
        int fr = -1, fs = -1, ones = 0, one = 1;
        MPI_Comm_rank(from_group, &fr);
        MPI_Comm_size(from_group, &fs);
        CHECK(fr == rank / 2 && fs == n_even);
        CHECK_OK(MPI_Allreduce(&one, &ones, 1, MPI_INT, MPI_SUM, from_group));
        CHECK(ones == n_even);
        MPI_Errhandler eh;
        CHECK_OK(MPI_Comm_get_errhandler(from_group, &eh));
        CHECK(eh == MPI_ERRORS_RETURN);
        CHECK_OK(MPI_Comm_free(&from_group));
    } else {
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
        CHECK(MPI_Comm_create_from_group(even_group, "x", MPI_INFO_NULL, MPI_ERRHANDLER_NULL, &from_group) !=
              MPI_SUCCESS); /* not a member */
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
    }
    CHECK_OK(MPI_Comm_create_from_group(world_group, "pontoon.test.world", MPI_INFO_NULL, MPI_ERRHANDLER_NULL,
                                        &from_group));
    CHECK_OK(MPI_Comm_compare(MPI_COMM_WORLD, from_group, &cmp));
    CHECK(cmp == MPI_CONGRUENT);
    CHECK_OK(MPI_Comm_free(&from_group));
    CHECK_OK(MPI_Group_free(&even_group));
    CHECK_OK(MPI_Group_free(&world_group));

    /* Many dup/free cycles do not run out of communicators. */
    for (int i = 0; i < 2000; i++) {
        CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &d));
        CHECK_OK(MPI_Comm_free(&d));
    }
    CHECK_OK(MPI_Comm_free(&half));

    int init = 0, fin = 1, provided = -1, main_thread = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    MPI_Query_thread(&provided);
    MPI_Is_thread_main(&main_thread);
    CHECK(init && !fin && provided == MPI_THREAD_FUNNELED && main_thread);
    /* A call from another thread is refused with an error (the state is the main
       thread's), and the main thread goes on. */
    int other = MPI_SUCCESS;
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, call_from_another_thread, &other) == 0);
    CHECK(pthread_join(thread, NULL) == 0);
    CHECK(other != MPI_SUCCESS);
    int maj, min;
    MPI_Abi_get_version(&maj, &min);
    CHECK(maj == MPI_ABI_VERSION && min == MPI_ABI_SUBVERSION);
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_SELF)) == MPI_COMM_SELF);
    CHECK(MPI_Wtick() > 0 && MPI_Wtime() >= 0);
    if (rank == 0) printf("comm OK on %d ranks\n", p);
    CHECK_OK(MPI_Finalize());
    MPI_Finalized(&fin);
    CHECK(fin);
    return 0;
}
