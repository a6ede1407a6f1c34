/* Datatypes through the standard ABI: sizes and extents of derived types, envelope
 * and contents, names, MPI_Pack/MPI_Unpack, and a struct sent between ranks. */
#include "check.h"
#include <stddef.h>

struct particle { double x[3]; int id; char tag; };

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);

    /* A struct matching the C layout, padding included. */
    int bl[3] = {3, 1, 1};
    MPI_Aint disp[3] = {offsetof(struct particle, x), offsetof(struct particle, id), offsetof(struct particle, tag)};
    MPI_Datatype tys[3] = {MPI_DOUBLE, MPI_INT, MPI_CHAR}, part;
    CHECK_OK(MPI_Type_create_struct(3, bl, disp, tys, &part));
    CHECK_OK(MPI_Type_commit(&part));
    int size;
    MPI_Aint lb, extent;
    CHECK_OK(MPI_Type_size(part, &size));
    CHECK_OK(MPI_Type_get_extent(part, &lb, &extent));
    CHECK(size == 3 * 8 + 4 + 1 && lb == 0 && extent == (MPI_Aint)sizeof(struct particle));

    int ni, na, nd, combiner;
    CHECK_OK(MPI_Type_get_envelope(part, &ni, &na, &nd, &combiner));
    CHECK(combiner == MPI_COMBINER_STRUCT && ni == 4 && na == 3 && nd == 3);
    int ints[4];
    MPI_Aint addrs[3];
    MPI_Datatype got[3];
    CHECK_OK(MPI_Type_get_contents(part, 4, 3, 3, ints, addrs, got));
    CHECK(ints[0] == 3 && ints[1] == 3 && addrs[1] == disp[1] && got[0] == MPI_DOUBLE && got[2] == MPI_CHAR);
    CHECK_OK(MPI_Type_get_envelope(MPI_INT, &ni, &na, &nd, &combiner));
    CHECK(combiner == MPI_COMBINER_NAMED);

    MPI_Datatype vec, outer;
    CHECK_OK(MPI_Type_vector(2, 1, 3, MPI_INT, &vec));
    CHECK_OK(MPI_Type_contiguous(2, vec, &outer));
    CHECK_OK(MPI_Type_get_envelope(outer, &ni, &na, &nd, &combiner));
    CHECK(combiner == MPI_COMBINER_CONTIGUOUS && ni == 1 && nd == 1);
    MPI_Datatype inner;
    CHECK_OK(MPI_Type_get_contents(outer, 1, 0, 1, ints, addrs, &inner));
    CHECK(ints[0] == 2);
    CHECK_OK(MPI_Type_get_envelope(inner, &ni, &na, &nd, &combiner));
    CHECK(combiner == MPI_COMBINER_VECTOR && ni == 3);
    CHECK_OK(MPI_Type_free(&inner)); /* a new handle, the program's to free */

    char name[MPI_MAX_OBJECT_NAME];
    int len;
    CHECK_OK(MPI_Type_set_name(part, "particle"));
    CHECK_OK(MPI_Type_get_name(part, name, &len));
    CHECK(strcmp(name, "particle") == 0 && len == 8);
    CHECK_OK(MPI_Type_get_name(MPI_DOUBLE, name, &len));
    CHECK(strcmp(name, "MPI_DOUBLE") == 0);

    /* Pack two particles and an int, unpack them elsewhere. */
    struct particle ps[2] = {{{1, 2, 3}, 7, 'a'}, {{4, 5, 6}, 8, 'b'}}, qs[2];
    memset(qs, 0, sizeof qs);
    int need, need_int;
    CHECK_OK(MPI_Pack_size(2, part, MPI_COMM_WORLD, &need));
    CHECK_OK(MPI_Pack_size(1, MPI_INT, MPI_COMM_WORLD, &need_int));
    CHECK(need == 2 * size);
    char *buf = malloc(need + need_int);
    int pos = 0, extra = 42, extra_back = 0;
    CHECK_OK(MPI_Pack(ps, 2, part, buf, need + need_int, &pos, MPI_COMM_WORLD));
    CHECK_OK(MPI_Pack(&extra, 1, MPI_INT, buf, need + need_int, &pos, MPI_COMM_WORLD));
    CHECK(pos == need + need_int);
    pos = 0;
    CHECK_OK(MPI_Unpack(buf, need + need_int, &pos, qs, 2, part, MPI_COMM_WORLD));
    CHECK_OK(MPI_Unpack(buf, need + need_int, &pos, &extra_back, 1, MPI_INT, MPI_COMM_WORLD));
    CHECK(qs[1].x[2] == 6 && qs[1].id == 8 && qs[1].tag == 'b' && qs[0].id == 7 && extra_back == 42);

    /* A 2x3 block at (1, 2) of a 4x5 C array, and at (1, 2) of a Fortran-order one. */
    int full[20], sub_got[6], sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 2};
    for (int i = 0; i < 20; i++) full[i] = i;
    MPI_Datatype sub_c, sub_f;
    CHECK_OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sub_c));
    CHECK_OK(MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &sub_f));
    CHECK_OK(MPI_Type_commit(&sub_c));
    CHECK_OK(MPI_Type_commit(&sub_f));
    CHECK_OK(MPI_Type_get_extent(sub_c, &lb, &extent));
    CHECK(lb == 0 && extent == 20 * (MPI_Aint)sizeof(int));
    CHECK_OK(MPI_Sendrecv(full, 1, sub_c, 0, 9, sub_got, 6, MPI_INT, 0, 9, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < 3; c++) CHECK(sub_got[r * 3 + c] == (1 + r) * 5 + (2 + c));
    CHECK_OK(MPI_Sendrecv(full, 1, sub_f, 0, 9, sub_got, 6, MPI_INT, 0, 9, MPI_COMM_SELF, MPI_STATUS_IGNORE));
    for (int c = 0; c < 3; c++) /* Fortran: the first index varies fastest */
        for (int r = 0; r < 2; r++) CHECK(sub_got[c * 2 + r] == (1 + r) + (2 + c) * 4);
    CHECK_OK(MPI_Type_free(&sub_c));
    CHECK_OK(MPI_Type_free(&sub_f));
    MPI_Datatype matched;
    CHECK_OK(MPI_Type_match_size(MPI_TYPECLASS_REAL, 8, &matched));
    CHECK_OK(MPI_Type_size(matched, &size));
    CHECK(size == 8);

    /* The struct across ranks, as MPI_PACKED on the way out. */
    if (p > 1) {
        if (rank == 0) {
            CHECK_OK(MPI_Send(buf, need, MPI_PACKED, 1, 3, MPI_COMM_WORLD));
        } else if (rank == 1) {
            memset(qs, 0, sizeof qs);
            CHECK_OK(MPI_Recv(qs, 2, part, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            CHECK(qs[0].x[0] == 1 && qs[1].tag == 'b');
        }
    }
    free(buf);
    CHECK_OK(MPI_Type_free(&part));
    CHECK_OK(MPI_Type_free(&outer));
    CHECK_OK(MPI_Type_free(&vec));
    if (rank == 0) printf("types OK on %d ranks\n", p);
    CHECK_OK(MPI_Finalize());
    return 0;
}
