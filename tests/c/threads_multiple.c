/* MPI_THREAD_MULTIPLE: eight threads per rank call MPI at the same time.
 *  1. Point to point on distinct tags: each thread sends a numbered stream to the next
 *     rank (blocking and non-blocking sends, alternating) and receives the previous
 *     rank's on its own tag, checking the order.
 *  2. MPI_ANY_SOURCE: every thread of every rank sends a numbered stream to rank 0 on
 *     one tag; rank 0's threads each receive from any source, and the numbers from each
 *     sending thread come in order (the standard's order per sending thread and
 *     communicator; each receiving thread checks what it got, and all counts add up).
 *  3. MPI_Mprobe/MPI_Mrecv races: rank 0's threads all probe for the same messages;
 *     each is received exactly once.
 *  4. Requests across threads: one thread starts receives, another waits for them, a
 *     third tests sends the first started, while the sends' partners run late.
 *  5. Concurrent collectives, each thread on its own MPI_Comm_dup (duplicated by the
 *     threads at once), interleaved differently at each rank; non-blocking ones; then
 *     concurrent MPI_Comm_split.
 *  6. MPI_Finalize while another thread is alive but idle. */
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "check.h"

enum { THREADS = 8, MESSAGES = 200, ANY = 100, PROBED = 40, POSTED = 16, ROUNDS = 30 };

static int rank, size;

static void run_threads(void *(*body)(void *)) {
    pthread_t threads[THREADS];
    for (long t = 0; t < THREADS; t++) CHECK(pthread_create(&threads[t], NULL, body, (void *)t) == 0);
    for (int t = 0; t < THREADS; t++) CHECK(pthread_join(threads[t], NULL) == 0);
}

/* 1. Each thread: a numbered stream to the right on tag t, one from the left. */
static void *streams(void *arg) {
    int t = (int)(long)arg;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int i = 0; i < MESSAGES; i++) {
        int out[3] = {rank, t, i}, in[3] = {-1, -1, -1};
        MPI_Request r;
        CHECK_OK(MPI_Irecv(in, 3, MPI_INT, left, t, MPI_COMM_WORLD, &r));
        if (i % 2) {
            CHECK_OK(MPI_Send(out, 3, MPI_INT, right, t, MPI_COMM_WORLD));
        } else {
            MPI_Request s;
            CHECK_OK(MPI_Isend(out, 3, MPI_INT, right, t, MPI_COMM_WORLD, &s));
            CHECK_OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        }
        MPI_Status st;
        CHECK_OK(MPI_Wait(&r, &st));
        CHECK(in[0] == left && in[1] == t && in[2] == i);
        CHECK(st.MPI_SOURCE == left && st.MPI_TAG == t);
    }
    return NULL;
}

/* 2. Every thread sends ANY numbered messages to rank 0 on tag 1000; rank 0's threads
 * receive size * ANY messages in all, from any source. */
static atomic_int any_received;
static void *any_source(void *arg) {
    int t = (int)(long)arg;
    MPI_Request sends[ANY];
    int out[ANY][3];
    for (int i = 0; i < ANY; i++) {
        out[i][0] = rank, out[i][1] = t, out[i][2] = i;
        CHECK_OK(MPI_Isend(out[i], 3, MPI_INT, 0, 1000, MPI_COMM_WORLD, &sends[i]));
    }
    if (rank == 0) {
        /* What this thread saw last from each sending thread: later numbers only. Rank
         * 0's THREADS receivers take size * ANY each: all that size * THREADS senders
         * sent. */
        int last[64][THREADS];
        for (int r = 0; r < size; r++)
            for (int u = 0; u < THREADS; u++) last[r][u] = -1;
        for (int i = 0; i < size * ANY; i++) {
            int in[3];
            MPI_Status st;
            CHECK_OK(MPI_Recv(in, 3, MPI_INT, MPI_ANY_SOURCE, 1000, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == in[0] && in[0] < size && in[1] >= 0 && in[1] < THREADS);
            CHECK(in[2] > last[in[0]][in[1]]);
            last[in[0]][in[1]] = in[2];
            atomic_fetch_add(&any_received, 1);
        }
    }
    CHECK_OK(MPI_Waitall(ANY, sends, MPI_STATUSES_IGNORE));
    return NULL;
}

/* 3. Every thread of every rank sends PROBED messages to rank 0 on tag 2000; rank 0's
 * threads each take PROBED * size of them with MPI_Mprobe and MPI_Mrecv. */
static atomic_int probed_seen[64 * THREADS * PROBED];
static void *mprobe_race(void *arg) {
    int t = (int)(long)arg;
    int out[PROBED];
    MPI_Request sends[PROBED];
    for (int i = 0; i < PROBED; i++) {
        out[i] = (rank * THREADS + t) * PROBED + i;
        CHECK_OK(MPI_Isend(&out[i], 1, MPI_INT, 0, 2000, MPI_COMM_WORLD, &sends[i]));
    }
    if (rank == 0) {
        for (int i = 0; i < PROBED * size; i++) {
            MPI_Message msg;
            MPI_Status st;
            int count = -1, v = -1;
            CHECK_OK(MPI_Mprobe(MPI_ANY_SOURCE, 2000, MPI_COMM_WORLD, &msg, &st));
            CHECK_OK(MPI_Get_count(&st, MPI_INT, &count));
            CHECK(count == 1);
            CHECK_OK(MPI_Mrecv(&v, 1, MPI_INT, &msg, &st));
            CHECK(msg == MPI_MESSAGE_NULL);
            CHECK(v >= 0 && v < 64 * THREADS * PROBED && v / (THREADS * PROBED) == st.MPI_SOURCE);
            CHECK(atomic_fetch_add(&probed_seen[v], 1) == 0);
        }
    }
    CHECK_OK(MPI_Waitall(PROBED, sends, MPI_STATUSES_IGNORE));
    return NULL;
}

/* 4. Thread 0 posts receives and sends; thread 1 waits for the receives; thread 2
 * tests the sends until they are done; thread 3 sends late what thread 0 receives. */
static MPI_Request posted_recvs[POSTED], posted_sends[POSTED];
static int posted_in[POSTED], posted_out[POSTED];
static atomic_int posted = 0;
static void *across_threads(void *arg) {
    int t = (int)(long)arg;
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    if (t == 0) {
        for (int i = 0; i < POSTED; i++) {
            posted_out[i] = rank * 100 + i;
            CHECK_OK(MPI_Irecv(&posted_in[i], 1, MPI_INT, left, 3000 + i, MPI_COMM_WORLD, &posted_recvs[i]));
            CHECK_OK(MPI_Issend(&posted_out[i], 1, MPI_INT, right, 4000 + i, MPI_COMM_WORLD, &posted_sends[i]));
        }
        atomic_store(&posted, 1);
    } else if (t == 1) {
        while (!atomic_load(&posted)) usleep(100);
        MPI_Status st[POSTED];
        CHECK_OK(MPI_Waitall(POSTED, posted_recvs, st));
        for (int i = 0; i < POSTED; i++) CHECK(posted_in[i] == left * 1000 + i && st[i].MPI_SOURCE == left);
    } else if (t == 2) {
        while (!atomic_load(&posted)) usleep(100);
        int done = 0;
        while (!done) CHECK_OK(MPI_Testall(POSTED, posted_sends, &done, MPI_STATUSES_IGNORE));
    } else if (t == 3) {
        usleep(20000);
        for (int i = 0; i < POSTED; i++) {
            int v = rank * 1000 + i;
            CHECK_OK(MPI_Send(&v, 1, MPI_INT, right, 3000 + i, MPI_COMM_WORLD));
        }
    } else if (t == 4) {
        usleep(40000); /* the synchronous sends complete only once these match them */
        for (int i = POSTED - 1; i >= 0; i--) {
            int v = -1;
            CHECK_OK(MPI_Recv(&v, 1, MPI_INT, left, 4000 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(v == left * 100 + i);
        }
    }
    return NULL;
}

/* 5. Collectives on each thread's own duplicate of its own parent, duplicated by the
 * threads at once (a communicator is used by one thread at a time, as the standard
 * asks; the threads' calls on different ones interleave differently at each rank). */
static MPI_Comm parent[THREADS], own[THREADS];
static void *collectives(void *arg) {
    int t = (int)(long)arg;
    CHECK_OK(MPI_Comm_dup(parent[t], &own[t]));
    MPI_Comm c = own[t];
    for (int round = 0; round < ROUNDS; round++) {
        if ((round + rank + t) % 7 == 0) usleep(200);
        for (int k = 0; k < 4; k++) {
            switch ((k + t) % 4) {
            case 0: {
                long sum = 0, mine = rank + t + round;
                CHECK_OK(MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, c));
                CHECK(sum == (long)size * (size - 1) / 2 + (long)size * (t + round));
                break;
            }
            case 1: {
                int v[64];
                for (int i = 0; i < 64; i++) v[i] = rank == round % size ? t * 1000 + round + i : -1;
                CHECK_OK(MPI_Bcast(v, 64, MPI_INT, round % size, c));
                for (int i = 0; i < 64; i++) CHECK(v[i] == t * 1000 + round + i);
                break;
            }
            case 2: {
                int all[64];
                int mine = rank * 10 + t;
                CHECK_OK(MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, c));
                for (int r = 0; r < size && r < 64; r++) CHECK(all[r] == r * 10 + t);
                break;
            }
            default:
                CHECK_OK(MPI_Barrier(c));
            }
        }
        /* All reduce the kinds in one order for this; ranks start them in different
         * orders before waiting. */
        long a = t, b = round, ra = 0, rb = 0;
        MPI_Request r[2];
        CHECK_OK(MPI_Iallreduce(&a, &ra, 1, MPI_LONG, MPI_SUM, c, &r[0]));
        CHECK_OK(MPI_Iallreduce(&b, &rb, 1, MPI_LONG, MPI_MAX, c, &r[1]));
        CHECK_OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK(ra == (long)t * size && rb == round);
    }
    MPI_Comm half;
    CHECK_OK(MPI_Comm_split(c, rank % 2, -rank, &half));
    int hs = 0, hr = -1;
    CHECK_OK(MPI_Comm_size(half, &hs));
    CHECK_OK(MPI_Comm_rank(half, &hr));
    CHECK(hs == (size + 1 - rank % 2) / 2 && hr == (hs - 1) - rank / 2);
    int sum = 0, one = 1;
    CHECK_OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, half));
    CHECK(sum == hs);
    CHECK_OK(MPI_Comm_free(&half));
    CHECK_OK(MPI_Comm_free(&own[t]));
    CHECK_OK(MPI_Comm_free(&parent[t]));
    return NULL;
}

/* 6. A thread that stays alive, outside MPI, across MPI_Finalize. */
static pthread_mutex_t idle_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cond = PTHREAD_COND_INITIALIZER;
static int finalized = 0;
static void *idle_thread(void *arg) {
    (void)arg;
    pthread_mutex_lock(&idle_mutex);
    while (!finalized) pthread_cond_wait(&idle_cond, &idle_mutex);
    pthread_mutex_unlock(&idle_mutex);
    return NULL;
}

int main(int argc, char **argv) {
    int provided = -1, queried = -1;
    CHECK_OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided));
    CHECK(provided == MPI_THREAD_MULTIPLE);
    CHECK_OK(MPI_Query_thread(&queried));
    CHECK(queried == MPI_THREAD_MULTIPLE);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 64);
    pthread_t idle;
    CHECK(pthread_create(&idle, NULL, idle_thread, NULL) == 0);

    run_threads(streams);
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    run_threads(any_source);
    CHECK(rank != 0 || atomic_load(&any_received) == THREADS * ANY * size);
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    run_threads(mprobe_race);
    if (rank == 0)
        for (int v = 0; v < size * THREADS * PROBED; v++) CHECK(atomic_load(&probed_seen[v]) == 1);
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    run_threads(across_threads);
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    for (int t = 0; t < THREADS; t++) CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &parent[t]));
    run_threads(collectives);

    if (rank == 0) printf("threads_multiple OK on %d ranks\n", size);
    fflush(stdout);
    CHECK_OK(MPI_Finalize());
    pthread_mutex_lock(&idle_mutex);
    finalized = 1;
    pthread_cond_broadcast(&idle_cond);
    pthread_mutex_unlock(&idle_mutex);
    CHECK(pthread_join(idle, NULL) == 0);
    return 0;
}
