// shmpp: the bare shared-memory ping-pong, the floor under any MPI's 8 B one-way time on
// one host. Two processes (fork), pinned to CPUs 0 and 1, exchange 8 B messages through
// lines of a shared mapping, as pontoon's boxes do: per direction, SLOTS boxes of 128
// bytes used in turn, each stamped by the producer with its number; the consumer counts
// what it emptied on a control line that the producer reads once it has filled them
// all. No MPI, no matching, no checks: what is left is the hardware moving lines.
//
//   shmpp [round trips, default 1000000] [boxes per direction, default 4]
//
// Prints the one-way time (round trip / 2) in microseconds, after 1000 round trips
// of warm-up.
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LINE 128
#if defined(__x86_64__) || defined(__i386__)
#define RELAX() __builtin_ia32_pause()
#else
#define RELAX() ((void)0)
#endif
#define WARMUP 1000

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// A direction: the control line (the consumer's count of emptied boxes), then the boxes.
static volatile uint32_t *emptied(char *dir) { return (volatile uint32_t *)dir; }
static volatile uint32_t *stamp(char *dir, uint32_t slots, uint32_t n) {
    return (volatile uint32_t *)(dir + LINE * (1 + n % slots));
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    uint32_t slots = argc > 2 ? (uint32_t)atoi(argv[2]) : 4;
    if (iters <= WARMUP || slots == 0) {
        fprintf(stderr, "usage: shmpp [round trips > %d] [boxes per direction > 0]\n", WARMUP);
        return 2;
    }
    size_t dir_len = (size_t)LINE * (1 + slots);
    char *map = mmap(NULL, 2 * dir_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(map, 0, 2 * dir_len);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    int me = child == 0;
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    CPU_SET(me, &cpus);
    if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
        perror("sched_setaffinity");
    }
    char *out = map + (size_t)me * dir_len, *in = map + (size_t)(1 - me) * dir_len;
    uint32_t sent = 0, received = 0, room_until = slots;
    uint64_t sum = 0;
    double start = 0;
    for (long i = 1; i <= iters; i++) {
        if (i == WARMUP) {
            start = now();
        }
        for (int step = 0; step < 2; step++) {
            if ((step == 0) == (me == 0)) {
                if (sent == room_until) {
                    while ((room_until = __atomic_load_n(emptied(out), __ATOMIC_ACQUIRE) + slots) == sent) {
                        RELAX();
                    }
                }
                volatile uint32_t *box = stamp(out, slots, sent);
                ((volatile uint64_t *)box)[2] = (uint64_t)i;
                __atomic_store_n(box, sent + 1, __ATOMIC_RELEASE);
                sent++;
            } else {
                volatile uint32_t *box = stamp(in, slots, received);
                while (__atomic_load_n(box, __ATOMIC_ACQUIRE) != received + 1) {
                    RELAX();
                }
                sum += ((volatile uint64_t *)box)[2];
                received++;
                __atomic_store_n(emptied(in), received, __ATOMIC_RELEASE);
            }
        }
    }
    if (me == 0) {
        double t = now() - start;
        printf("%u boxes: %.3f us one-way\n", slots, t / (double)(iters - WARMUP + 1) / 2 * 1e6);
        waitpid(child, NULL, 0);
    }
    return sum == 0;
}
