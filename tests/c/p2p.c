/* Point-to-point semantics through the standard ABI: blocking and non-blocking,
 * wildcards, probes and counts, truncation with MPI_ERRORS_RETURN, MPI_PROC_NULL,
 * synchronous sends, non-contiguous datatypes (blocking and non-blocking), the
 * request completion family, receive cancellation, persistent requests, buffered
 * sends and matched probes.
 * Any number of ranks >= 2. */
#include "check.h"

int main(int argc, char **argv) {
    CHECK_OK(MPI_Init(&argc, &argv));
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    CHECK_OK(MPI_Get_library_version(version, &len));
    CHECK(len == (int)strlen(version) && strstr(version, "pontoon") != NULL);

    /* Ring with Sendrecv and a status. */
    int out = rank * 10, in = -1;
    MPI_Status st;
    CHECK_OK(MPI_Sendrecv(&out, 1, MPI_INT, next, 7, &in, 1, MPI_INT, prev, 7, MPI_COMM_WORLD, &st));
    CHECK(in == prev * 10 && st.MPI_SOURCE == prev && st.MPI_TAG == 7);
    int n = -1;
    CHECK_OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 1);

    /* Many non-blocking messages, matched in order per (sender, tag). */
    enum { K = 64 };
    int sendv[K], recvv[K];
    MPI_Request reqs[2 * K];
    for (int i = 0; i < K; i++) {
        sendv[i] = rank * 1000 + i;
        CHECK_OK(MPI_Irecv(&recvv[i], 1, MPI_INT, prev, 3, MPI_COMM_WORLD, &reqs[i]));
    }
    for (int i = 0; i < K; i++)
        CHECK_OK(MPI_Isend(&sendv[i], 1, MPI_INT, next, 3, MPI_COMM_WORLD, &reqs[K + i]));
    MPI_Status sts[2 * K];
    CHECK_OK(MPI_Waitall(2 * K, reqs, sts));
    for (int i = 0; i < K; i++) {
        CHECK(recvv[i] == prev * 1000 + i);
        CHECK(reqs[i] == MPI_REQUEST_NULL);
    }

    /* A large message (rendezvous) into a bigger buffer: the count says how much came. */
    int big = 1 << 20;
    double *a = malloc(sizeof(double) * (big + 5)), *b = malloc(sizeof(double) * (big + 5));
    for (int i = 0; i < big; i++) a[i] = rank + i * 0.5;
    MPI_Request r[2];
    CHECK_OK(MPI_Irecv(b, big + 5, MPI_DOUBLE, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &r[0]));
    CHECK_OK(MPI_Isend(a, big, MPI_DOUBLE, next, 11, MPI_COMM_WORLD, &r[1]));
    CHECK_OK(MPI_Waitall(2, r, sts));
    CHECK(sts[0].MPI_SOURCE == prev && sts[0].MPI_TAG == 11);
    CHECK_OK(MPI_Get_count(&sts[0], MPI_DOUBLE, &n));
    CHECK(n == big);
    for (int i = 0; i < big; i += 4099) CHECK(b[i] == prev + i * 0.5);

    /* A window of mid-sized messages, each its own buffer, half posted before their
     * receives: on one node the first go through the ring and those behind it are read
     * in one copy, several per system call (PONTOON_SINGLE_COPY=auto). */
    enum { W = 24, M = 8192 }; /* 32 KiB of ints each */
    int *win_out = malloc(sizeof(int) * W * M), *win_in = malloc(sizeof(int) * W * M);
    for (int i = 0; i < W * M; i++) {
        win_out[i] = rank * 1000003 + i;
        win_in[i] = -1;
    }
    MPI_Request wr[2 * W];
    for (int w = 0; w < W / 2; w++)
        CHECK_OK(MPI_Irecv(win_in + w * M, M, MPI_INT, prev, 200 + w, MPI_COMM_WORLD, &wr[w]));
    for (int w = 0; w < W; w++)
        CHECK_OK(MPI_Isend(win_out + w * M, M, MPI_INT, next, 200 + w, MPI_COMM_WORLD, &wr[W + w]));
    for (int w = W / 2; w < W; w++)
        CHECK_OK(MPI_Irecv(win_in + w * M, M, MPI_INT, prev, 200 + w, MPI_COMM_WORLD, &wr[w]));
    CHECK_OK(MPI_Waitall(2 * W, wr, MPI_STATUSES_IGNORE));
    for (int i = 0; i < W * M; i++) CHECK(win_in[i] == prev * 1000003 + i);
    free(win_out);
    free(win_in);

    /* Probe, then receive exactly what the probe said. */
    if (rank == 0) {
        int v[3] = {1, 2, 3};
        CHECK_OK(MPI_Ssend(v, 3, MPI_INT, 1, 21, MPI_COMM_WORLD));
    } else if (rank == 1) {
        CHECK_OK(MPI_Probe(0, 21, MPI_COMM_WORLD, &st));
        CHECK_OK(MPI_Get_count(&st, MPI_INT, &n));
        CHECK(n == 3);
        int flag = 0;
        while (!flag) CHECK_OK(MPI_Iprobe(MPI_ANY_SOURCE, 21, MPI_COMM_WORLD, &flag, &st));
        int v[3];
        CHECK_OK(MPI_Recv(v, n, MPI_INT, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &st));
        CHECK(v[0] == 1 && v[2] == 3);
        /* 12 bytes are not a whole number of doubles. */
        CHECK_OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
        CHECK(n == MPI_UNDEFINED);
        CHECK_OK(MPI_Get_elements(&st, MPI_BYTE, &n));
        CHECK(n == 12);
    }

    /* A matched probe takes the message: a wildcard receive gets the next one. */
    if (rank == 0) {
        int first = 111, second = 222;
        CHECK_OK(MPI_Send(&first, 1, MPI_INT, 1, 25, MPI_COMM_WORLD));
        CHECK_OK(MPI_Send(&second, 1, MPI_INT, 1, 25, MPI_COMM_WORLD));
    } else if (rank == 1) {
        MPI_Message msg = MPI_MESSAGE_NULL;
        int flag = 0;
        while (!flag) CHECK_OK(MPI_Improbe(MPI_ANY_SOURCE, 25, MPI_COMM_WORLD, &flag, &msg, &st));
        CHECK(msg != MPI_MESSAGE_NULL && st.MPI_SOURCE == 0);
        int v = 0, w = 0;
        CHECK_OK(MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK(w == 222);
        CHECK_OK(MPI_Mrecv(&v, 1, MPI_INT, &msg, &st));
        CHECK(v == 111 && st.MPI_TAG == 25 && msg == MPI_MESSAGE_NULL);
        CHECK_OK(MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st));
        CHECK(msg == MPI_MESSAGE_NO_PROC);
        CHECK_OK(MPI_Mrecv(&v, 1, MPI_INT, &msg, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL);
    }
    if (rank == 0) {
        double big_msg[5000];
        for (int i = 0; i < 5000; i++) big_msg[i] = i;
        CHECK_OK(MPI_Send(big_msg, 5000, MPI_DOUBLE, 1, 26, MPI_COMM_WORLD)); /* rendezvous */
    } else if (rank == 1) {
        MPI_Message msg;
        CHECK_OK(MPI_Mprobe(0, 26, MPI_COMM_WORLD, &msg, &st));
        CHECK_OK(MPI_Get_count(&st, MPI_DOUBLE, &n));
        double *got_msg = malloc(sizeof(double) * n);
        MPI_Request mr;
        CHECK_OK(MPI_Imrecv(got_msg, n, MPI_DOUBLE, &msg, &mr));
        CHECK_OK(MPI_Wait(&mr, &st));
        CHECK(n == 5000 && got_msg[4999] == 4999);
        free(got_msg);
    }

    /* Truncation: reported, with ERRORS_RETURN, as MPI_ERR_TRUNCATE with a message.
     * Errors with no valid communicator go to MPI_COMM_SELF's handler (MPI-4). */
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN));
    if (rank == 0) {
        int v[4] = {5, 6, 7, 8};
        CHECK_OK(MPI_Send(v, 4, MPI_INT, 1, 31, MPI_COMM_WORLD));
    } else if (rank == 1) {
        int v[2] = {0, 0};
        int rc = MPI_Recv(v, 2, MPI_INT, 0, 31, MPI_COMM_WORLD, &st);
        int cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE);
        char msg[MPI_MAX_ERROR_STRING];
        MPI_Error_string(rc, msg, &len);
        CHECK(strstr(msg, "truncated") != NULL && strstr(msg, "rank 0") != NULL);
        CHECK(v[0] == 5 && v[1] == 6);
    }
    /* Bad arguments come back as their class. */
    int rc = MPI_Send(&out, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK);
    rc = MPI_Send(&out, 1, MPI_INT, next, -5, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TAG);
    rc = MPI_Send(&out, 1, MPI_DATATYPE_NULL, next, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TYPE);
    rc = MPI_Send(&out, 1, MPI_INT, next, 0, MPI_COMM_NULL);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_COMM);

    /* MPI_PROC_NULL completes at once with the empty status. */
    CHECK_OK(MPI_Recv(&in, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG);
    CHECK_OK(MPI_Get_count(&st, MPI_INT, &n));
    CHECK(n == 0);
    /* ... whatever datatype handle it names (MPICH's tests pass MPI_DATATYPE_NULL). */
    MPI_Request nullreq;
    CHECK_OK(MPI_Irecv(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &nullreq));
    CHECK_OK(MPI_Wait(&nullreq, &st));
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG);
    CHECK_OK(MPI_Send(NULL, 0, MPI_DATATYPE_NULL, MPI_PROC_NULL, 0, MPI_COMM_WORLD));

    /* A column of a 4x4 matrix (vector type), blocking and non-blocking. */
    MPI_Datatype column;
    CHECK_OK(MPI_Type_vector(4, 1, 4, MPI_INT, &column));
    rc = MPI_Send(&out, 1, column, next, 0, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TYPE); /* not committed yet */
    CHECK_OK(MPI_Type_commit(&column));
    int m[16], got[16];
    for (int i = 0; i < 16; i++) { m[i] = rank * 100 + i; got[i] = -1; }
    CHECK_OK(MPI_Sendrecv(&m[1], 1, column, next, 41, &got[2], 1, column, prev, 41, MPI_COMM_WORLD, &st));
    for (int i = 0; i < 16; i++)
        CHECK(got[i] == (i % 4 == 2 ? prev * 100 + (i - 1) : -1));
    CHECK_OK(MPI_Get_elements(&st, column, &n));
    CHECK(n == 4);
    for (int i = 0; i < 16; i++) got[i] = -1;
    CHECK_OK(MPI_Irecv(&got[3], 1, column, prev, 42, MPI_COMM_WORLD, &r[0]));
    CHECK_OK(MPI_Isend(&m[0], 1, column, next, 42, MPI_COMM_WORLD, &r[1]));
    int idx = -1, done = 0;
    while (done < 2) {
        CHECK_OK(MPI_Waitany(2, r, &idx, &st));
        CHECK(idx == 0 || idx == 1);
        done++;
    }
    CHECK_OK(MPI_Waitany(2, r, &idx, &st));
    CHECK(idx == MPI_UNDEFINED);
    for (int i = 0; i < 16; i++)
        CHECK(got[i] == (i % 4 == 3 ? prev * 100 + (i - 3) : -1));
    CHECK_OK(MPI_Type_free(&column));
    CHECK(column == MPI_DATATYPE_NULL);

    /* Testsome until both are done. */
    CHECK_OK(MPI_Irecv(&in, 1, MPI_INT, prev, 51, MPI_COMM_WORLD, &r[0]));
    CHECK_OK(MPI_Isend(&out, 1, MPI_INT, next, 51, MPI_COMM_WORLD, &r[1]));
    int left = 2, outcount, indices[2];
    while (left > 0) {
        CHECK_OK(MPI_Testsome(2, r, &outcount, indices, sts));
        if (outcount != MPI_UNDEFINED) left -= outcount;
    }
    CHECK(in == prev * 10);

    /* Request_get_status reports completion and leaves the request to Wait. */
    CHECK_OK(MPI_Irecv(&in, 1, MPI_INT, prev, 52, MPI_COMM_WORLD, &r[0]));
    CHECK_OK(MPI_Send(&out, 1, MPI_INT, next, 52, MPI_COMM_WORLD));
    int gs_flag = 0;
    while (!gs_flag) CHECK_OK(MPI_Request_get_status(r[0], &gs_flag, &st));
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 52 && r[0] != MPI_REQUEST_NULL);
    CHECK_OK(MPI_Wait(&r[0], &st));
    CHECK(st.MPI_SOURCE == prev && r[0] == MPI_REQUEST_NULL);

    /* A receive nobody sends to can be cancelled. */
    CHECK_OK(MPI_Irecv(&in, 1, MPI_INT, prev, 999, MPI_COMM_WORLD, &r[0]));
    CHECK_OK(MPI_Cancel(&r[0]));
    CHECK_OK(MPI_Wait(&r[0], &st));
    int cancelled = 0;
    CHECK_OK(MPI_Test_cancelled(&st, &cancelled));
    CHECK(cancelled);

    /* Buffered sends: return at once, limited by the attached buffer. */
    int bv[16], bgot[16];
    for (int i = 0; i < 16; i++) bv[i] = rank + i;
    char tiny[64];
    CHECK_OK(MPI_Buffer_attach(tiny, sizeof tiny));
    rc = MPI_Bsend(bv, 16, MPI_INT, next, 71, MPI_COMM_WORLD); /* needs 64 + overhead */
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER);
    void *detached_at;
    int detached_size;
    CHECK_OK(MPI_Buffer_detach(&detached_at, &detached_size));
    CHECK(detached_at == tiny && detached_size == (int)sizeof tiny);
    int bsize = 4 * (16 * (int)sizeof(int) + MPI_BSEND_OVERHEAD);
    char *battach = malloc(bsize);
    CHECK_OK(MPI_Buffer_attach(battach, bsize));
    for (int i = 0; i < 4; i++) CHECK_OK(MPI_Bsend(bv, 16, MPI_INT, next, 71, MPI_COMM_WORLD));
    for (int i = 0; i < 4; i++) {
        CHECK_OK(MPI_Recv(bgot, 16, MPI_INT, prev, 71, MPI_COMM_WORLD, &st));
        CHECK(bgot[15] == prev + 15);
    }
    CHECK_OK(MPI_Buffer_detach(&detached_at, &detached_size));
    CHECK(detached_at == battach && detached_size == bsize);
    free(battach);

    /* MPI-4.1 buffers: a communicator's own buffer, flushes, MPI_BUFFER_AUTOMATIC. */
    MPI_Comm bc;
    CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &bc));
    CHECK_OK(MPI_Comm_set_errhandler(bc, MPI_ERRORS_RETURN));
    rc = MPI_Bsend(bv, 16, MPI_INT, next, 72, bc); /* nothing attached anywhere */
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER);
    char *cbuf = malloc(bsize);
    CHECK_OK(MPI_Comm_attach_buffer(bc, cbuf, bsize));
    CHECK(MPI_Comm_attach_buffer(bc, cbuf, bsize) != MPI_SUCCESS); /* attached already */
    for (int i = 0; i < 4; i++) CHECK_OK(MPI_Bsend(bv, 16, MPI_INT, next, 72, bc));
    CHECK_OK(MPI_Comm_flush_buffer(bc));
    MPI_Request flush;
    CHECK_OK(MPI_Bsend(bv, 16, MPI_INT, next, 72, bc));
    CHECK_OK(MPI_Comm_iflush_buffer(bc, &flush));
    CHECK_OK(MPI_Wait(&flush, MPI_STATUS_IGNORE));
    for (int i = 0; i < 5; i++) {
        CHECK_OK(MPI_Recv(bgot, 16, MPI_INT, prev, 72, bc, &st));
        CHECK(bgot[15] == prev + 15);
    }
    /* The communicator's buffer serves only it: MPI_COMM_WORLD still has none. */
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    rc = MPI_Bsend(bv, 16, MPI_INT, next, 73, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER);
    CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    CHECK_OK(MPI_Comm_detach_buffer(bc, &detached_at, &detached_size));
    CHECK(detached_at == cbuf && detached_size == bsize);
    free(cbuf);
    CHECK_OK(MPI_Comm_attach_buffer(bc, MPI_BUFFER_AUTOMATIC, 0));
    CHECK_OK(MPI_Bsend(bv, 16, MPI_INT, next, 74, bc));
    CHECK_OK(MPI_Recv(bgot, 16, MPI_INT, prev, 74, bc, &st));
    CHECK_OK(MPI_Comm_detach_buffer(bc, &detached_at, &detached_size));
    CHECK(detached_at == MPI_BUFFER_AUTOMATIC);
    CHECK_OK(MPI_Comm_free(&bc));
    /* The process's buffer flushes the same ways. */
    CHECK_OK(MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0));
    CHECK_OK(MPI_Bsend(bv, 16, MPI_INT, next, 75, MPI_COMM_WORLD));
    CHECK_OK(MPI_Buffer_iflush(&flush));
    CHECK_OK(MPI_Wait(&flush, MPI_STATUS_IGNORE));
    CHECK_OK(MPI_Bsend(bv, 16, MPI_INT, next, 75, MPI_COMM_WORLD));
    CHECK_OK(MPI_Buffer_flush());
    for (int i = 0; i < 2; i++) CHECK_OK(MPI_Recv(bgot, 16, MPI_INT, prev, 75, MPI_COMM_WORLD, &st));
    CHECK_OK(MPI_Buffer_detach(&detached_at, &detached_size));
    CHECK(detached_at == MPI_BUFFER_AUTOMATIC);

    /* Isendrecv and Isendrecv_replace: one request for both halves. */
    int ir_in = -1, ir_out = rank * 7, repl = rank * 9;
    MPI_Request ir;
    CHECK_OK(MPI_Isendrecv(&ir_out, 1, MPI_INT, next, 81, &ir_in, 1, MPI_INT, prev, 81, MPI_COMM_WORLD, &ir));
    CHECK_OK(MPI_Wait(&ir, &st));
    CHECK(ir_in == prev * 7 && st.MPI_SOURCE == prev && st.MPI_TAG == 81);
    CHECK_OK(MPI_Isendrecv_replace(&repl, 1, MPI_INT, next, 82, prev, 82, MPI_COMM_WORLD, &ir));
    CHECK_OK(MPI_Wait(&ir, &st));
    CHECK(repl == prev * 9);

    /* Persistent requests: the same ring three times; inactive ones complete at once. */
    int pin = -1, pout = 0;
    MPI_Request pr[2];
    CHECK_OK(MPI_Recv_init(&pin, 1, MPI_INT, prev, 61, MPI_COMM_WORLD, &pr[0]));
    CHECK_OK(MPI_Send_init(&pout, 1, MPI_INT, next, 61, MPI_COMM_WORLD, &pr[1]));
    for (int round = 0; round < 3; round++) {
        pout = rank * 10 + round;
        CHECK_OK(MPI_Startall(2, pr));
        CHECK_OK(MPI_Waitall(2, pr, sts));
        CHECK(pin == prev * 10 + round && sts[0].MPI_SOURCE == prev);
        CHECK(pr[0] != MPI_REQUEST_NULL && pr[1] != MPI_REQUEST_NULL);
    }
    int none_active = 0;
    CHECK_OK(MPI_Waitany(2, pr, &none_active, &st)); /* inactive ones count as null */
    CHECK(none_active == MPI_UNDEFINED);
    CHECK_OK(MPI_Wait(&pr[0], &st)); /* inactive: the empty status */
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG);
    CHECK_OK(MPI_Request_free(&pr[0]));
    CHECK_OK(MPI_Request_free(&pr[1]));
    CHECK(pr[0] == MPI_REQUEST_NULL);

    /* Blocking receives of small messages (the immediate path, which takes a message
     * straight off its lane) in an order other than the sends': each must give way to
     * the general path and still get its own message, and wildcards the earliest. */
    {
        int v[6] = {81, 82, 83, 84, 85, 86}, x = -1;
        for (int i = 0; i < 6; i++) CHECK_OK(MPI_Send(&v[i], 1, MPI_INT, next, 81 + i, MPI_COMM_WORLD));
        CHECK_OK(MPI_Recv(&x, 1, MPI_INT, prev, 82, MPI_COMM_WORLD, &st));
        CHECK(x == 82 && st.MPI_TAG == 82 && st.MPI_SOURCE == prev);
        CHECK_OK(MPI_Recv(&x, 1, MPI_INT, prev, 81, MPI_COMM_WORLD, &st));
        CHECK(x == 81 && st.MPI_TAG == 81);
        CHECK_OK(MPI_Recv(&x, 1, MPI_INT, prev, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK(x == 83 && st.MPI_TAG == 83);
        /* An earlier non-blocking receive of the same envelope is matched first. */
        int early = -1;
        MPI_Request er;
        CHECK_OK(MPI_Irecv(&early, 1, MPI_INT, prev, MPI_ANY_TAG, MPI_COMM_WORLD, &er));
        CHECK_OK(MPI_Recv(&x, 1, MPI_INT, prev, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        CHECK_OK(MPI_Wait(&er, MPI_STATUS_IGNORE));
        CHECK(early == 84 && x == 85 && st.MPI_TAG == 85);
        /* Two messages read from the lane at once: the second must reach a later
         * non-blocking receive (left in the lane's staging it waited for a socket
         * readiness that never came). */
        int two[2] = {91, 92}, got2 = -1;
        CHECK_OK(MPI_Send(&two[0], 1, MPI_INT, next, 91, MPI_COMM_WORLD));
        CHECK_OK(MPI_Send(&two[1], 1, MPI_INT, next, 92, MPI_COMM_WORLD));
        CHECK_OK(MPI_Recv(&x, 1, MPI_INT, prev, 91, MPI_COMM_WORLD, &st));
        MPI_Request later;
        CHECK_OK(MPI_Irecv(&got2, 1, MPI_INT, prev, 92, MPI_COMM_WORLD, &later));
        CHECK_OK(MPI_Wait(&later, &st));
        CHECK(x == 91 && got2 == 92 && st.MPI_TAG == 92);
        /* Zero bytes, then one into a buffer too small (MPI_ERR_TRUNCATE). */
        CHECK_OK(MPI_Send(NULL, 0, MPI_INT, next, 87, MPI_COMM_WORLD));
        CHECK_OK(MPI_Recv(NULL, 0, MPI_INT, prev, 87, MPI_COMM_WORLD, &st));
        CHECK_OK(MPI_Get_count(&st, MPI_INT, &n));
        CHECK(n == 0 && st.MPI_TAG == 87);
        MPI_Errhandler was;
        CHECK_OK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &was));
        CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        char small[2];
        int tcls = -1, trc = MPI_Recv(small, 2, MPI_CHAR, prev, 86, MPI_COMM_WORLD, &st);
        CHECK_OK(MPI_Error_class(trc, &tcls));
        CHECK(tcls == MPI_ERR_TRUNCATE);
        CHECK_OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, was));
        CHECK_OK(MPI_Errhandler_free(&was));
    }

    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD));
    free(a);
    free(b);
    if (rank == 0) printf("p2p OK on %d ranks\n", size);
    CHECK_OK(MPI_Finalize());
    return 0;
}
