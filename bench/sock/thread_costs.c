/* What each way of letting several threads call MPI costs a call, measured on this host
 * with no MPI (issue 55 chooses between them, docs/architecture.md "Threads"):
 *   none         the loop alone (a volatile increment): subtract it from the others
 *   flag         a relaxed load of "is MULTIPLE on?" and its branch: what every call pays
 *                when the program did not ask for MPI_THREAD_MULTIPLE
 *   mutex        lock and unlock of an uncontended pthread mutex: one lock around the
 *                library, taken by a thread alone
 *   reentrant    the same with an owner check first (an MPI call from a callback inside
 *                an MPI call takes the lock again)
 *   contended    two threads taking turns at one mutex, each lock and unlock (the cost of
 *                the one lock when two threads call MPI at once)
 *   handoff-spin a call handed to a progress thread that busy-polls a cache line, and the
 *                answer back (a command queue whose server never sleeps: it costs a core)
 *   handoff-wake the same when both threads sleep on a futex until woken (a command queue
 *                whose server sleeps when idle, and a caller that does not spin)
 *     thread_costs [ITERS]   (default 2000000; handoff-wake uses ITERS / 100)
 * Prints: NAME NS_PER_CALL */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static long iters;
static _Atomic int multiple = 0;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned long owner = 0;
static unsigned long depth = 0;
static volatile unsigned long sink = 0;

static void reentrant_lock(void) {
    unsigned long me = (unsigned long)pthread_self();
    if (atomic_load_explicit(&owner, memory_order_relaxed) == me) {
        depth++;
        return;
    }
    pthread_mutex_lock(&lock);
    atomic_store_explicit(&owner, me, memory_order_relaxed);
    depth = 1;
}

static void reentrant_unlock(void) {
    if (--depth == 0) {
        atomic_store_explicit(&owner, 0, memory_order_relaxed);
        pthread_mutex_unlock(&lock);
    }
}

static void *contender(void *arg) {
    (void)arg;
    for (long i = 0; i < iters; i++) {
        pthread_mutex_lock(&lock);
        sink++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

/* The command slot: 0 empty, 1 a call waiting, 2 answered, 3 stop. */
static _Alignas(64) _Atomic int slot = 0;
static _Atomic int server_sleeps = 0;

static long futex(_Atomic int *addr, int op, int val) {
    return syscall(SYS_futex, (int *)addr, op, val, NULL, NULL, 0);
}

static void *server(void *arg) {
    int sleeping = *(int *)arg;
    for (;;) {
        int s = atomic_load_explicit(&slot, memory_order_acquire);
        if (s == 1) {
            sink++;
            atomic_store_explicit(&slot, 2, memory_order_release);
            if (sleeping) futex(&slot, FUTEX_WAKE_PRIVATE, 1);
        } else if (s == 3) {
            return NULL;
        } else if (sleeping) {
            atomic_store(&server_sleeps, 1);
            futex(&slot, FUTEX_WAIT_PRIVATE, s);
            atomic_store(&server_sleeps, 0);
        }
    }
}

static double handoff(int sleeping, long n) {
    pthread_t t;
    atomic_store(&slot, 0);
    pthread_create(&t, NULL, server, &sleeping);
    double t0 = now();
    for (long i = 0; i < n; i++) {
        atomic_store_explicit(&slot, 1, memory_order_release);
        if (sleeping) futex(&slot, FUTEX_WAKE_PRIVATE, 1);
        int s;
        while ((s = atomic_load_explicit(&slot, memory_order_acquire)) != 2) {
            if (sleeping) futex(&slot, FUTEX_WAIT_PRIVATE, s);
        }
        atomic_store_explicit(&slot, 0, memory_order_relaxed);
    }
    double t1 = now();
    atomic_store(&slot, 3);
    futex(&slot, FUTEX_WAKE_PRIVATE, 1);
    pthread_join(t, NULL);
    return (t1 - t0) / n * 1e9;
}

int main(int argc, char **argv) {
    iters = argc > 1 ? atol(argv[1]) : 2000000;
    double t0 = now();
    for (long i = 0; i < iters; i++) sink++;
    printf("none %.2f\n", (now() - t0) / iters * 1e9);

    t0 = now();
    for (long i = 0; i < iters; i++) {
        if (atomic_load_explicit(&multiple, memory_order_relaxed)) pthread_mutex_lock(&lock);
        sink++;
    }
    printf("flag %.2f\n", (now() - t0) / iters * 1e9);

    t0 = now();
    for (long i = 0; i < iters; i++) {
        pthread_mutex_lock(&lock);
        sink++;
        pthread_mutex_unlock(&lock);
    }
    printf("mutex %.2f\n", (now() - t0) / iters * 1e9);

    t0 = now();
    for (long i = 0; i < iters; i++) {
        reentrant_lock();
        sink++;
        reentrant_unlock();
    }
    printf("reentrant %.2f\n", (now() - t0) / iters * 1e9);

    pthread_t t;
    t0 = now();
    pthread_create(&t, NULL, contender, NULL);
    contender(NULL);
    pthread_join(t, NULL);
    printf("contended %.2f\n", (now() - t0) / (2.0 * iters) * 1e9);

    printf("handoff-spin %.2f\n", handoff(0, iters / 10));
    printf("handoff-wake %.2f\n", handoff(1, iters / 100));
    return 0;
}
