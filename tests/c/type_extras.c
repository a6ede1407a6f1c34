/* Datatype features beyond the constructors: attributes on datatypes (copy on dup,
 * delete on free, the last set first, errors of callbacks, freed keyvals), the external32
 * representation (MPI_Pack_external: big-endian, long as 4 bytes, long double as IEEE
 * quad) and distributed arrays (MPI_Type_create_darray: block, cyclic and none, both
 * orders, every process of the grid). Local to each rank. The attribute and darray parts
 * pass on MPICH 4.0 and Open MPI 4.1; their external32 does not (MPICH 4.0 crashes on a
 * struct in MPI_Pack_external_size, Open MPI packs long in 8 bytes where the standard's
 * table says 4 — MPICH's own sizes of predefined types agree with the table). Also the
 * MPI-3 `_x` queries and the Fortran 90 parameterized types made from C
 * (MPI_Type_create_f90_*: their envelope, contents, and use in messages and reductions). */
#include "check.h"
#include <stddef.h>

static int deleted[8], ndeleted;

static int copy_plus_one(MPI_Datatype t, int kv, void *extra, void *in, void *out, int *flag) {
    (void)t, (void)kv, (void)extra;
    *(MPI_Aint *)out = (MPI_Aint)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int record_delete(MPI_Datatype t, int kv, void *val, void *extra) {
    (void)t, (void)kv;
    if ((MPI_Aint)extra == 99) /* the keyval whose deletion fails */
        return MPI_ERR_OTHER;
    deleted[ndeleted++] = (int)(MPI_Aint)val;
    return MPI_SUCCESS;
}

static void attributes(void) {
    int k1, k2, kfail, flag;
    void *v;
    CHECK_OK(MPI_Type_create_keyval(copy_plus_one, record_delete, &k1, NULL));
    CHECK_OK(MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, record_delete, &k2, NULL));
    CHECK_OK(MPI_Type_create_keyval(MPI_TYPE_DUP_FN, record_delete, &kfail, (void *)99));
    MPI_Datatype t, d;
    CHECK_OK(MPI_Type_contiguous(2, MPI_INT, &t));
    CHECK_OK(MPI_Type_get_attr(t, k1, &v, &flag));
    CHECK(flag == 0);
    CHECK_OK(MPI_Type_set_attr(t, k1, (void *)10));
    CHECK_OK(MPI_Type_set_attr(t, k2, (void *)20));
    CHECK_OK(MPI_Type_get_attr(t, k1, &v, &flag));
    CHECK(flag == 1 && (MPI_Aint)v == 10);
    /* Replacing a value deletes the old one. */
    CHECK_OK(MPI_Type_set_attr(t, k2, (void *)21));
    CHECK(ndeleted == 1 && deleted[0] == 20);
    /* A dup copies through the copy callbacks: k1 adds one, k2 never copies. */
    CHECK_OK(MPI_Type_dup(t, &d));
    CHECK_OK(MPI_Type_get_attr(d, k1, &v, &flag));
    CHECK(flag == 1 && (MPI_Aint)v == 11);
    CHECK_OK(MPI_Type_get_attr(d, k2, &v, &flag));
    CHECK(flag == 0);
    /* A freed keyval still reads and deletes the values set with it. */
    CHECK_OK(MPI_Type_free_keyval(&k2));
    CHECK(k2 == MPI_KEYVAL_INVALID);
    /* Freeing deletes every value (pontoon: the last set first; MPI leaves the order
     * open). The duplicate first: MPICH and Open MPI free a type others were made of
     * only once those are freed. */
    ndeleted = 0;
    CHECK_OK(MPI_Type_free(&d));
    CHECK(ndeleted == 1 && deleted[0] == 11);
    ndeleted = 0;
    CHECK_OK(MPI_Type_free(&t));
    CHECK(ndeleted == 2 && deleted[0] + deleted[1] == 31);
    if (on_pontoon())
        CHECK(deleted[0] == 21);
    /* A delete callback's error is the error of the call that ran it; the value stays
     * (and the type, whose freeing would fail the same way, is left). */
    MPI_Datatype e;
    CHECK_OK(MPI_Type_contiguous(3, MPI_INT, &e));
    CHECK_OK(MPI_Type_set_attr(e, kfail, (void *)5));
    CHECK(MPI_Type_delete_attr(e, kfail) != MPI_SUCCESS);
    CHECK_OK(MPI_Type_get_attr(e, kfail, &v, &flag));
    CHECK(flag == 1 && (MPI_Aint)v == 5);
    /* Attributes on a predefined datatype. */
    CHECK_OK(MPI_Type_set_attr(MPI_INT, k1, (void *)7));
    CHECK_OK(MPI_Type_get_attr(MPI_INT, k1, &v, &flag));
    CHECK(flag == 1 && (MPI_Aint)v == 7);
    ndeleted = 0;
    CHECK_OK(MPI_Type_delete_attr(MPI_INT, k1));
    CHECK(ndeleted == 1 && deleted[0] == 7);
    /* A communicator keyval is not a datatype keyval. */
    int ck;
    CHECK_OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &ck, NULL));
    CHECK(MPI_Type_set_attr(MPI_INT, ck, NULL) != MPI_SUCCESS);
    CHECK_OK(MPI_Comm_free_keyval(&ck));
    CHECK_OK(MPI_Type_free_keyval(&k1));
    CHECK_OK(MPI_Type_free_keyval(&kfail));
}

struct rec {
    int a;
    long b;
    double c;
    long double d;
    char e;
};

static void external32(void) {
    struct rec r[2] = {{1, -2, 1.5, 1.5L, 'x'}, {-1, 70000, -0.25, -3.0L, 'y'}};
    int bl[5] = {1, 1, 1, 1, 1};
    MPI_Aint disp[5] = {offsetof(struct rec, a), offsetof(struct rec, b), offsetof(struct rec, c),
                        offsetof(struct rec, d), offsetof(struct rec, e)};
    MPI_Datatype types[5] = {MPI_INT, MPI_LONG, MPI_DOUBLE, MPI_LONG_DOUBLE, MPI_CHAR}, t, tr;
    CHECK_OK(MPI_Type_create_struct(5, bl, disp, types, &t));
    CHECK_OK(MPI_Type_create_resized(t, 0, sizeof(struct rec), &tr));
    CHECK_OK(MPI_Type_commit(&tr));
    MPI_Aint size, pos = 0;
    CHECK_OK(MPI_Pack_external_size("external32", 2, tr, &size));
    CHECK(size == 2 * (4 + 4 + 8 + 16 + 1));
    unsigned char buf[80];
    memset(buf, 0xee, sizeof buf);
    CHECK_OK(MPI_Pack_external("external32", r, 2, tr, buf, sizeof buf, &pos));
    CHECK(pos == size);
    static const unsigned char first[33] = {
        0, 0, 0, 1,                                             /* int 1 */
        0xff, 0xff, 0xff, 0xfe,                                 /* long -2 in 4 bytes */
        0x3f, 0xf8, 0, 0, 0, 0, 0, 0,                           /* double 1.5 */
        0x3f, 0xff, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* long double 1.5, quad */
        'x'};
    CHECK(memcmp(buf, first, 33) == 0);
    CHECK(buf[66] == 0xee);
    struct rec back[2];
    memset(back, 0, sizeof back);
    pos = 0;
    CHECK_OK(MPI_Unpack_external("external32", buf, size, &pos, back, 2, tr));
    CHECK(pos == size);
    for (int i = 0; i < 2; i++)
        CHECK(back[i].a == r[i].a && back[i].b == r[i].b && back[i].c == r[i].c && back[i].d == r[i].d &&
              back[i].e == r[i].e);
    /* Too small a buffer: an error, nothing written past it. */
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    pos = 0;
    CHECK(MPI_Pack_external("external32", r, 2, tr, buf, 40, &pos) != MPI_SUCCESS);
    MPI_Type_free(&t);
    MPI_Type_free(&tr);
}

/* Whether grid coordinate c of p holds index i of n under distribution d (darg a). */
static int holds(int i, int n, int d, int a, int p, int c) {
    if (d == MPI_DISTRIBUTE_NONE)
        return 1;
    if (d == MPI_DISTRIBUTE_BLOCK) {
        int b = a == MPI_DISTRIBUTE_DFLT_DARG ? (n + p - 1) / p : a;
        return i / b == c;
    }
    int b = a == MPI_DISTRIBUTE_DFLT_DARG ? 1 : a;
    return (i / b) % p == c;
}

/* Every process of a grid: its darray picks exactly its elements, in array order. */
static void darray_case(int rows, int cols, int p0, int p1, int d0, int a0, int d1, int a1, int order) {
    int g[2] = {rows, cols}, d[2] = {d0, d1}, a[2] = {a0, a1}, p[2] = {p0, p1};
    int n = rows * cols, *global = malloc(n * sizeof(int)), *got = malloc(n * sizeof(int)), total = 0;
    for (int i = 0; i < n; i++)
        global[i] = i;
    for (int rank = 0; rank < p0 * p1; rank++) {
        MPI_Datatype t;
        CHECK_OK(MPI_Type_create_darray(p0 * p1, rank, 2, g, d, a, p, order, MPI_INT, &t));
        CHECK_OK(MPI_Type_commit(&t));
        MPI_Aint lb, extent;
        int size, pos = 0;
        MPI_Type_get_extent(t, &lb, &extent);
        MPI_Type_size(t, &size);
        CHECK(lb == 0 && extent == (MPI_Aint)(n * sizeof(int)));
        CHECK_OK(MPI_Pack(global, 1, t, got, n * sizeof(int), &pos, MPI_COMM_SELF));
        CHECK(pos == size);
        int c0 = rank / p1, c1 = rank % p1, k = 0;
        /* Array order: C is row-major, Fortran column-major (dimension 0 fastest). */
        for (int outer = 0; outer < (order == MPI_ORDER_C ? rows : cols); outer++)
            for (int inner = 0; inner < (order == MPI_ORDER_C ? cols : rows); inner++) {
                int i = order == MPI_ORDER_C ? outer : inner, j = order == MPI_ORDER_C ? inner : outer;
                if (holds(i, rows, d0, a0, p0, c0) && holds(j, cols, d1, a1, p1, c1)) {
                    int at = order == MPI_ORDER_C ? i * cols + j : i + j * rows;
                    CHECK(k < size / 4 && got[k] == at);
                    k++;
                }
            }
        CHECK(k * 4 == size);
        total += k;
        MPI_Type_free(&t);
    }
    CHECK(total == n);
    free(global);
    free(got);
}

static void darrays(void) {
    darray_case(5, 7, 2, 2, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_CYCLIC, 2, MPI_ORDER_C);
    darray_case(5, 7, 2, 2, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_CYCLIC, 2,
                MPI_ORDER_FORTRAN);
    darray_case(8, 3, 3, 1, MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_NONE,
                MPI_DISTRIBUTE_DFLT_DARG, MPI_ORDER_C);
    darray_case(4, 9, 1, 3, MPI_DISTRIBUTE_NONE, MPI_DISTRIBUTE_DFLT_DARG, MPI_DISTRIBUTE_BLOCK, 4, MPI_ORDER_FORTRAN);
    /* Blocks too small to cover the dimension: an error. */
    int g[1] = {10}, d[1] = {MPI_DISTRIBUTE_BLOCK}, a[1] = {2}, p[1] = {2};
    MPI_Datatype t;
    CHECK(MPI_Type_create_darray(2, 0, 1, g, d, a, p, MPI_ORDER_C, MPI_INT, &t) != MPI_SUCCESS);
}

static void x_queries(void) {
    MPI_Datatype v;
    CHECK_OK(MPI_Type_vector(3, 2, 5, MPI_DOUBLE, &v));
    CHECK_OK(MPI_Type_commit(&v));
    MPI_Count size, lb, extent, tlb, textent, elements;
    CHECK_OK(MPI_Type_size_x(v, &size));
    CHECK_OK(MPI_Type_get_extent_x(v, &lb, &extent));
    CHECK_OK(MPI_Type_get_true_extent_x(v, &tlb, &textent));
    CHECK(size == 48 && lb == 0 && extent == 12 * 8 && tlb == 0 && textent == 12 * 8);
    MPI_Status st;
    CHECK_OK(MPI_Status_set_elements_x(&st, MPI_DOUBLE, 5));
    CHECK_OK(MPI_Get_elements_x(&st, v, &elements));
    CHECK(elements == 5);
    CHECK_OK(MPI_Type_free(&v));
}

/* One Fortran 90 type asked for by precision and range: its size, how it says it was
 * made, and that it carries a message and a sum. */
static void f90_case(int combiner, int p, int r, int want_size) {
    MPI_Datatype t;
    switch (combiner) {
    case MPI_COMBINER_F90_REAL:
        CHECK_OK(MPI_Type_create_f90_real(p, r, &t));
        break;
    case MPI_COMBINER_F90_COMPLEX:
        CHECK_OK(MPI_Type_create_f90_complex(p, r, &t));
        break;
    default:
        CHECK_OK(MPI_Type_create_f90_integer(r, &t));
    }
    int size, nints, nadds, ntypes, comb, ints[2] = {-1, -1};
    CHECK_OK(MPI_Type_size(t, &size));
    CHECK(size == want_size);
    CHECK_OK(MPI_Type_get_envelope(t, &nints, &nadds, &ntypes, &comb));
    CHECK(comb == combiner && nadds == 0 && ntypes == 0);
    CHECK(nints == (combiner == MPI_COMBINER_F90_INTEGER ? 1 : 2));
    CHECK_OK(MPI_Type_get_contents(t, 2, 0, 0, ints, NULL, NULL));
    if (combiner == MPI_COMBINER_F90_INTEGER)
        CHECK(ints[0] == r);
    else
        CHECK(ints[0] == p && ints[1] == r);
    unsigned char a[32], b[32];
    memset(a, 0, sizeof a);
    memset(b, 0xff, sizeof b);
    MPI_Request req[2];
    CHECK_OK(MPI_Isend(a, 1, t, 0, 42, MPI_COMM_SELF, &req[0]));
    CHECK_OK(MPI_Irecv(b, 1, t, 0, 42, MPI_COMM_SELF, &req[1]));
    CHECK_OK(MPI_Waitall(2, req, MPI_STATUSES_IGNORE));
    CHECK(memcmp(a, b, size) == 0);
    CHECK_OK(MPI_Reduce_local(a, b, 1, t, MPI_SUM));
    CHECK(memcmp(a, b, size) == 0);
}

static void f90_types(void) {
    f90_case(MPI_COMBINER_F90_REAL, 3, 10, 4);
    f90_case(MPI_COMBINER_F90_REAL, 3, MPI_UNDEFINED, 4);
    f90_case(MPI_COMBINER_F90_REAL, MPI_UNDEFINED, 30, 4);
    f90_case(MPI_COMBINER_F90_REAL, 7, 30, 8);
    f90_case(MPI_COMBINER_F90_REAL, MPI_UNDEFINED, 300, 8);
    f90_case(MPI_COMBINER_F90_COMPLEX, 3, 10, 8);
    f90_case(MPI_COMBINER_F90_COMPLEX, 7, MPI_UNDEFINED, 16);
    f90_case(MPI_COMBINER_F90_INTEGER, 0, 2, 1);
    f90_case(MPI_COMBINER_F90_INTEGER, 0, 5, 4);
    f90_case(MPI_COMBINER_F90_INTEGER, 0, 10, 8);
    /* No such type: an error, not a type. */
    MPI_Datatype t = MPI_DATATYPE_NULL;
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK(MPI_Type_create_f90_real(40, 5000, &t) != MPI_SUCCESS);
    CHECK(MPI_Type_create_f90_integer(40, &t) != MPI_SUCCESS);
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL));
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    attributes();
    external32();
    darrays();
    x_queries();
    f90_types();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("type_extras OK on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
