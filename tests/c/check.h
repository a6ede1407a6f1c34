/* Shared by the C tests: CHECK(cond) reports the failing line and ends the job. */
#ifndef CHECK_H
#define CHECK_H
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            int rank_ = -1;                                                         \
            MPI_Comm_rank(MPI_COMM_WORLD, &rank_);                                  \
            fprintf(stderr, "rank %d: %s:%d: CHECK failed: %s\n", rank_, __FILE__, \
                    __LINE__, #cond);                                               \
            fflush(stderr);                                                         \
            MPI_Abort(MPI_COMM_WORLD, 3);                                           \
        }                                                                           \
    } while (0)

#define CHECK_OK(call) CHECK((call) == MPI_SUCCESS)

#endif
