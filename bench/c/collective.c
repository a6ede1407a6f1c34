/* Collective latency in plain standard MPI (any mpicc), the method of osu_bcast,
 * osu_reduce, osu_allgather and osu_alltoall: for each size, warm-up calls, then timed calls,
 * each timed alone and followed by an untimed barrier (back to back, a bcast or reduce would
 * time how fast the root can start them, not how long one takes); each rank's average time
 * per call, averaged over the ranks (OSU's "Avg Latency"). Every
 * result is checked once per size (a wrong one aborts the job). Prints one line per size:
 *     SIZE_BYTES AVG_LATENCY_US
 * SIZE_BYTES: the broadcast buffer (bcast), the reduced doubles (reduce, MPI_SUM to rank
 * 0), or each block one rank sends to another (allgather, alltoall).
 * Usage: collective bcast|reduce|allgather|alltoall [MAX_BYTES [ITERS]]  (defaults 1048576 and
 * 1000; fewer iterations above 8 KiB, as OSU does). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op { BCAST, REDUCE, ALLGATHER, ALLTOALL };

static unsigned char pattern(long a, long b) { return (unsigned char)((a * 31 + b * 7 + 1) & 0xff); }

static void fail(int rank, const char *what, size_t bytes) {
    fprintf(stderr, "rank %d: %s of %zu bytes: wrong result\n", rank, what, bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *name = argc > 1 ? argv[1] : "";
    enum op op = !strcmp(name, "bcast")       ? BCAST
                 : !strcmp(name, "reduce")    ? REDUCE
                 : !strcmp(name, "allgather") ? ALLGATHER
                                              : ALLTOALL;
    long max = argc > 2 ? atol(argv[2]) : 1L << 20;
    int iters_small = argc > 3 ? atoi(argv[3]) : 1000;
    if ((op == ALLTOALL && strcmp(name, "alltoall")) || max < 8 || iters_small < 1) {
        if (rank == 0) fprintf(stderr, "usage: collective bcast|reduce|allgather|alltoall [MAX_BYTES >= 8 [ITERS >= 1]]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t span = op == ALLTOALL || op == ALLGATHER ? (size_t)max * (size_t)size : (size_t)max;
    unsigned char *a = malloc(span), *b = malloc(span);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    lib[strcspn(lib, "\n")] = 0;
    if (rank == 0) printf("# library: %s\n# %s: bytes avg_latency_us (%d ranks)\n", lib, name, size);
    for (size_t bytes = op == REDUCE ? 8 : 1; bytes <= (size_t)max; bytes *= 2) {
        int count = (int)(op == REDUCE ? bytes / sizeof(double) : bytes);
        double *da = (double *)a, *db = (double *)b;
        for (size_t i = 0; i < span; i++) a[i] = 0;
        if (op == BCAST && rank == 0)
            for (size_t i = 0; i < bytes; i++) a[i] = pattern((long)i, 0);
        if (op == REDUCE)
            for (int i = 0; i < count; i++) da[i] = rank + 1.0;
        if (op == ALLTOALL)
            for (int j = 0; j < size; j++) memset(a + (size_t)j * bytes, pattern(rank, j), bytes);
        if (op == ALLGATHER) memset(a, pattern(rank, 0), bytes);
        int iters = bytes > 8192 ? iters_small / 10 + 1 : iters_small;
        int warmup = iters / 10 + 1;
        double timed = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warmup + iters; i++) {
            double t0 = MPI_Wtime();
            if (op == BCAST)
                MPI_Bcast(a, count, MPI_BYTE, 0, MPI_COMM_WORLD);
            else if (op == REDUCE)
                MPI_Reduce(da, db, count, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            else if (op == ALLGATHER)
                MPI_Allgather(a, count, MPI_BYTE, b, count, MPI_BYTE, MPI_COMM_WORLD);
            else
                MPI_Alltoall(a, count, MPI_BYTE, b, count, MPI_BYTE, MPI_COMM_WORLD);
            if (i >= warmup) timed += MPI_Wtime() - t0;
            MPI_Barrier(MPI_COMM_WORLD);
        }
        double mine = timed * 1e6 / iters, sum = 0;
        if (op == BCAST)
            for (size_t i = 0; i < bytes; i++)
                if (a[i] != pattern((long)i, 0)) fail(rank, name, bytes);
        if (op == REDUCE && rank == 0)
            for (int i = 0; i < count; i++)
                if (db[i] != size * (size + 1.0) / 2) fail(rank, name, bytes);
        if (op == ALLTOALL || op == ALLGATHER)
            for (int i = 0; i < size; i++)
                for (size_t k = 0; k < bytes; k++)
                    if (b[(size_t)i * bytes + k] != pattern(i, op == ALLTOALL ? rank : 0)) fail(rank, name, bytes);
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%zu %.2f\n", bytes, sum / size);
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
