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

/* Whether the MPI is pontoon: checks of what pontoon adds beyond the standard (an error
 * where another MPI would hang or do more) run only there. */
static inline int on_pontoon(void) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int n;
    MPI_Get_library_version(v, &n);
    return strstr(v, "pontoon") != NULL;
}

#endif
