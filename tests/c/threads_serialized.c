/* MPI_THREAD_SERIALIZED: four threads per rank take turns calling MPI (one at a time, in
 * an order of their own making: a mutex and a turn counter). Each turn is whole MPI work
 * on that thread: a ring exchange, an allreduce on the thread's own communicator, a
 * buffered send into the buffer the main thread attached, and the completion of the
 * non-blocking exchange the previous thread started (a request started on one thread
 * and completed on another). One thread's error is read, whole, by the next; each
 * thread's keyval is its own. At SERIALIZED, pontoon refuses a thread that calls while
 * another is inside (the program broke the level's rule) with MPI_ERR_OTHER, and the
 * other's call goes on unharmed. */
#include <stdatomic.h>
#include <unistd.h>
#include <pthread.h>

#include "check.h"

enum { THREADS = 4, ROUNDS = 25 };

static int rank, size;
static MPI_Comm own[THREADS];
static pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int turn = 0;
/* Started on one thread, completed on the next. */
static MPI_Request pending[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
static int pending_in = -1, pending_out = -1, pending_from = -1;
static int error_code = MPI_SUCCESS;
static int keyvals[THREADS];

static void one_turn(int t, int round) {
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    int main_thread = 1;
    CHECK_OK(MPI_Is_thread_main(&main_thread));
    CHECK(!main_thread);

    /* The previous turn's exchange, started on another thread. */
    if (pending[0] != MPI_REQUEST_NULL) {
        MPI_Status st[2];
        CHECK_OK(MPI_Waitall(2, pending, st));
        CHECK(pending_in == left * 1000 + pending_from);
    }
    pending_out = rank * 1000 + t * 100 + round;
    pending_from = t * 100 + round;
    CHECK_OK(MPI_Irecv(&pending_in, 1, MPI_INT, left, 7, MPI_COMM_WORLD, &pending[0]));
    CHECK_OK(MPI_Isend(&pending_out, 1, MPI_INT, right, 7, MPI_COMM_WORLD, &pending[1]));

    int out[3] = {rank, t, round}, in[3] = {-1, -1, -1};
    CHECK_OK(MPI_Sendrecv(out, 3, MPI_INT, right, t, in, 3, MPI_INT, left, t, MPI_COMM_WORLD,
                          MPI_STATUS_IGNORE));
    CHECK(in[0] == left && in[1] == t && in[2] == round);

    int sum = 0;
    CHECK_OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, own[t]));
    CHECK(sum == size * (size - 1) / 2);

    int b = rank * 10 + t, got = -1;
    CHECK_OK(MPI_Bsend(&b, 1, MPI_INT, right, 50 + t, MPI_COMM_WORLD));
    CHECK_OK(MPI_Recv(&got, 1, MPI_INT, left, 50 + t, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(got == left * 10 + t);

    if (round == 0) {
        CHECK_OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &keyvals[t], NULL));
        for (int u = 0; u < t; u++) CHECK(keyvals[u] != keyvals[t]);
        if (t == 0) { /* an error here, read by the next thread */
            int x = 0;
            error_code = MPI_Bcast(&x, 1, MPI_INT, size + 5, own[t]);
            CHECK(error_code != MPI_SUCCESS);
        }
        if (t == 1) {
            char text[MPI_MAX_ERROR_STRING];
            int len = 0, class = -1;
            CHECK_OK(MPI_Error_class(error_code, &class));
            CHECK(class == MPI_ERR_ROOT);
            CHECK_OK(MPI_Error_string(error_code, text, &len));
            CHECK(!on_pontoon() || strstr(text, "MPI_Bcast") != NULL); /* the whole message */
        }
    }
}

static void *worker(void *arg) {
    int t = (int)(long)arg;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_mutex_lock(&mutex);
        while (turn % THREADS != t) pthread_cond_wait(&cond, &mutex);
        one_turn(t, round);
        turn++;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&mutex);
    }
    return NULL;
}

static atomic_int receiving = 0, received = 0;

/* Rank 0: inside MPI_Recv until rank 1 sends (2 s after a barrier). */
static void *receive_slowly(void *arg) {
    (void)arg;
    int x = 0;
    atomic_store(&receiving, 1);
    CHECK_OK(MPI_Recv(&x, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(x == 42);
    atomic_store(&received, 1);
    return NULL;
}

/* While one thread is inside MPI, another's call is refused (pontoon at SERIALIZED). */
static void refused_while_another_is_inside(void) {
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    if (rank == 1) {
        sleep(2);
        int x = 42;
        CHECK_OK(MPI_Send(&x, 1, MPI_INT, 0, 99, MPI_COMM_WORLD));
    } else if (rank == 0) {
        pthread_t inside;
        CHECK(pthread_create(&inside, NULL, receive_slowly, NULL) == 0);
        while (!atomic_load(&receiving)) usleep(1000);
        int refused = 0, code = MPI_SUCCESS, class = -1, n = 0, flag = 0;
        while (!atomic_load(&received)) {
            int rc = MPI_Comm_size(MPI_COMM_WORLD, &n);
            if (rc != MPI_SUCCESS) {
                refused++;
                code = rc;
            }
            CHECK_OK(MPI_Initialized(&flag)); /* any thread, any time */
            CHECK(flag);
            usleep(1000);
        }
        CHECK(pthread_join(inside, NULL) == 0);
        CHECK_OK(MPI_Error_class(code, &class));
        CHECK(refused > 0 && class == MPI_ERR_OTHER);
    }
}

int main(int argc, char **argv) {
    int provided = -1, queried = -1, main_thread = 0;
    CHECK_OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided));
    CHECK(provided >= MPI_THREAD_SERIALIZED);
    CHECK_OK(MPI_Query_thread(&queried));
    CHECK(queried == provided);
    CHECK_OK(MPI_Is_thread_main(&main_thread));
    CHECK(main_thread);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int t = 0; t < THREADS; t++) {
        CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &own[t]));
        CHECK_OK(MPI_Comm_set_errhandler(own[t], MPI_ERRORS_RETURN));
    }
    static char buffer[THREADS * (MPI_BSEND_OVERHEAD + 64)];
    CHECK_OK(MPI_Buffer_attach(buffer, sizeof buffer));

    pthread_t threads[THREADS];
    for (long t = 0; t < THREADS; t++) CHECK(pthread_create(&threads[t], NULL, worker, (void *)t) == 0);
    for (int t = 0; t < THREADS; t++) CHECK(pthread_join(threads[t], NULL) == 0);

    if (size >= 2 && provided == MPI_THREAD_SERIALIZED && on_pontoon()) refused_while_another_is_inside();

    /* The last turn's exchange, completed on the main thread. */
    CHECK_OK(MPI_Waitall(2, pending, MPI_STATUSES_IGNORE));
    void *detached;
    int detached_size;
    CHECK_OK(MPI_Buffer_detach(&detached, &detached_size));
    CHECK(detached == buffer && detached_size == (int)sizeof buffer);
    for (int t = 0; t < THREADS; t++) {
        CHECK_OK(MPI_Comm_free_keyval(&keyvals[t]));
        CHECK_OK(MPI_Comm_free(&own[t]));
    }
    if (rank == 0) printf("threads_serialized OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
