/*
 * sockpp — bare-socket anchor: a busy-polling TCP ping-pong with no MPI and no
 * pontoon code, to measure what the kernel's TCP path itself costs, so that
 * pontoon's (and other MPIs') overhead can be quoted against it in the same run.
 *
 * Method (osu_latency's, with the iteration counts of pontoon's `pingpong` example, so
 * that the two tables compare line by line): for each size 0, 1, 2, 4 ... max, warm-up
 * round trips, then timed round trips; one-way latency = elapsed / (2 * iterations).
 * Sizes above 64 KiB use a tenth of the iterations (at least 100); warm-up is a tenth
 * of the timed count (at least 10).
 * Bandwidth is ping-pong bandwidth: size / one-way latency, in MB/s (10^6 B/s).
 * Sockets are non-blocking with TCP_NODELAY and both ends spin on send/recv until
 * every byte has moved, as MPI progress engines do; nothing ever sleeps in the
 * kernel, so CPU placement matters: say how the two ends were placed (--cpu).
 *
 * TCP has no empty message, so the 0-byte row moves a 1-byte token (its bandwidth
 * is reported as 0). The client (the timing side) sends its parameters to the
 * server first, so only the client needs to be told sizes and iterations.
 *
 *   sockpp --pair [-4|-6] [options]          both ends on this host over loopback (fork)
 *   sockpp server [--bind ADDR] [--port P]   one end; serves one client, then exits
 *   sockpp client HOST PORT [options]        the other end; prints the table
 *
 * Plain C11 + POSIX/Linux; build with `make -C bench`.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#define SOCKPP_MAGIC 0x534b5050u /* "SKPP" */
#define SOCKPP_VERSION 1u
#define DEFAULT_PORT "18515"
#define MAX_SIZE_LIMIT (1u << 30)

/* Sizes above LARGE_THRESHOLD use the "large" counts (as crates/pontoon/examples/pingpong.rs). */
#define DEF_ITERS 10000u
#define LARGE_THRESHOLD 65536u
#define UNSET UINT32_MAX

struct params {
    uint32_t max_size, large_threshold;
    uint32_t iters, warmup, iters_large, warmup_large;
};

struct opts {
    struct params p;
    int family;        /* AF_UNSPEC, AF_INET or AF_INET6 */
    int cpu_a, cpu_b;  /* -1: not pinned */
    int sockbuf;       /* SO_SNDBUF/SO_RCVBUF, 0: kernel default (autotuning) */
    int epoll_sets;    /* epoll sets the connection is added to (never waited on) */
    unsigned timeout;  /* seconds for one session, 0: none */
    const char *bind;
    const char *port;
};

static const char *prog = "sockpp";
static const char *role = "";

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s%s: ", prog, role);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static void on_alarm(int sig)
{
    static const char msg[] = "sockpp: timed out (the peer stopped answering); see --timeout\n";
    (void)sig;
    ssize_t r = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)r;
    _exit(3);
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: %s --pair [-4|-6] [options]         both ends on this host, over loopback\n"
        "       %s server [--bind ADDR] [--port P] [-4|-6] [--cpu A] [--sockbuf B] [--loop]\n"
        "       %s client HOST PORT [options]        prints the table\n"
        "\n"
        "Busy-polling TCP ping-pong (TCP_NODELAY, non-blocking, spin until every byte moved).\n"
        "Prints: size_bytes  latency_us  bandwidth_MBps  (one-way latency = round trip / 2,\n"
        "bandwidth = size / one-way latency in 10^6 B/s), sizes 0, 1, 2, 4 ... --max-size.\n"
        "\n"
        "options (client and --pair):\n"
        "  --iters N          timed round trips per size <= %u B (default %u)\n"
        "  --iters-large N    timed round trips for larger sizes (default: N/10, at least 100)\n"
        "  --warmup N         warm-up round trips per size <= %u B (default: N/10, at least 10)\n"
        "  --warmup-large N   warm-up round trips for larger sizes (default: a tenth, at least 10)\n"
        "  --quick            same as --iters 1000: a short run\n"
        "  --max-size BYTES   largest size, a power of two (default 4194304; alias --max)\n"
        "options (all):\n"
        "  --cpu A[,B]        pin with sched_setaffinity; --pair: A = client, B = server\n"
        "                     (one value pins both ends to A); client/server: this end to A\n"
        "  --sockbuf BYTES    set SO_SNDBUF and SO_RCVBUF (default: kernel autotuning)\n"
        "  --epoll-sets N     add the connection to N epoll sets that are never waited on, to\n"
        "                     measure what each set's wake-up callback costs a message (default 0)\n"
        "  --timeout SEC      give up when a session takes longer (default 600, 0 = never)\n"
        "  -4 | -6            address family (--pair: 127.0.0.1 or ::1; default IPv4)\n"
        "server only:\n"
        "  --bind ADDR        listen address (default: all, IPv6 dual-stack when available)\n"
        "  --port P           listen port (default %s; 0 picks one and prints it)\n"
        "  --loop             serve clients one after another instead of exiting\n",
        prog, prog, prog, LARGE_THRESHOLD, DEF_ITERS, LARGE_THRESHOLD, DEFAULT_PORT);
}

static unsigned long parse_num(const char *what, const char *s, unsigned long max)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v > max)
        die("bad %s '%s' (a number up to %lu)", what, s, max);
    return v;
}

static void parse_cpus(struct opts *o, const char *s)
{
    char *comma = strchr(s, ',');
    if (comma) {
        char first[32];
        size_t n = (size_t)(comma - s);
        if (n == 0 || n >= sizeof first)
            die("bad --cpu '%s'", s);
        memcpy(first, s, n);
        first[n] = 0;
        o->cpu_a = (int)parse_num("--cpu", first, CPU_SETSIZE - 1);
        o->cpu_b = (int)parse_num("--cpu", comma + 1, CPU_SETSIZE - 1);
    } else {
        o->cpu_a = o->cpu_b = (int)parse_num("--cpu", s, CPU_SETSIZE - 1);
    }
}

static void pin(int cpu)
{
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        die("cannot pin to cpu %d: %s", cpu, strerror(errno));
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void counts_for(const struct params *p, size_t size, uint32_t *warmup, uint32_t *iters)
{
    if (size > p->large_threshold) {
        *warmup = p->warmup_large;
        *iters = p->iters_large;
    } else {
        *warmup = p->warmup;
        *iters = p->iters;
    }
}

/* ---- busy-polling transfer ---------------------------------------------------------- */

static void send_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            die("send: %s", strerror(errno));
        }
    }
}

static void recv_all(int fd, char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
        } else if (n == 0) {
            die("peer closed the connection");
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            die("recv: %s", strerror(errno));
        }
    }
}

static void put32(unsigned char *b, uint32_t v)
{
    v = htonl(v);
    memcpy(b, &v, 4);
}
static uint32_t get32(const unsigned char *b)
{
    uint32_t v;
    memcpy(&v, b, 4);
    return ntohl(v);
}

static void tune_socket(int fd, const struct opts *o)
{
    int sockbuf = o->sockbuf;
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        die("TCP_NODELAY: %s", strerror(errno));
    if (sockbuf > 0) {
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof sockbuf) != 0 ||
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof sockbuf) != 0)
            die("SO_SNDBUF/SO_RCVBUF: %s", strerror(errno));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0)
        die("O_NONBLOCK: %s", strerror(errno));
    /* Kept open for the process's life on purpose: the registration is the point. */
    for (int i = 0; i < o->epoll_sets; i++) {
        int ep = epoll_create1(EPOLL_CLOEXEC);
        struct epoll_event ev = {.events = EPOLLIN};
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0)
            die("--epoll-sets: %s", strerror(errno));
    }
}

static char *alloc_buf(size_t size)
{
    void *p = NULL;
    size_t n = size ? size : 1;
    if (posix_memalign(&p, 4096, n) != 0)
        die("cannot allocate %zu bytes", n);
    memset(p, 0, n); /* fault the pages in before timing */
    return p;
}

static const char *addr_str(const struct sockaddr *sa, char *out, size_t outlen)
{
    char host[INET6_ADDRSTRLEN], serv[16];
    if (getnameinfo(sa, sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
                    host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        snprintf(out, outlen, "?");
    else if (sa->sa_family == AF_INET6)
        snprintf(out, outlen, "[%s]:%s", host, serv);
    else
        snprintf(out, outlen, "%s:%s", host, serv);
    return out;
}

/* ---- the two roles ------------------------------------------------------------------ */

/* Echo side: learns the parameters from the client, then answers every message. */
static void serve(int fd, const struct opts *o)
{
    unsigned char hello[32], ack[12];
    recv_all(fd, (char *)hello, sizeof hello);
    uint32_t status = 0;
    struct params p = {0};
    if (get32(hello) != SOCKPP_MAGIC || get32(hello + 4) != SOCKPP_VERSION) {
        status = 1;
    } else {
        p.max_size = get32(hello + 8);
        p.iters = get32(hello + 12);
        p.warmup = get32(hello + 16);
        p.iters_large = get32(hello + 20);
        p.warmup_large = get32(hello + 24);
        p.large_threshold = get32(hello + 28);
        if (p.max_size > MAX_SIZE_LIMIT)
            status = 2;
    }
    put32(ack, SOCKPP_MAGIC);
    put32(ack + 4, status);
    put32(ack + 8, (uint32_t)o->cpu_a);
    send_all(fd, (const char *)ack, sizeof ack);
    if (status != 0)
        die("refused a client (%s)", status == 1 ? "not a sockpp client of this version" : "size too large");

    char *buf = alloc_buf(p.max_size);
    for (size_t size = 0; size <= p.max_size; size = size ? size * 2 : 1) {
        size_t wire = size ? size : 1;
        uint32_t warmup, iters;
        counts_for(&p, size, &warmup, &iters);
        for (uint32_t i = 0; i < warmup + iters; i++) {
            recv_all(fd, buf, wire);
            send_all(fd, buf, wire);
        }
    }
    free(buf);
}

/* Timing side: sends the parameters, runs every size, prints the table. */
static void drive(int fd, const struct opts *o, int server_cpu_known, int server_cpu)
{
    const struct params *p = &o->p;
    unsigned char hello[32], ack[12];
    put32(hello, SOCKPP_MAGIC);
    put32(hello + 4, SOCKPP_VERSION);
    put32(hello + 8, p->max_size);
    put32(hello + 12, p->iters);
    put32(hello + 16, p->warmup);
    put32(hello + 20, p->iters_large);
    put32(hello + 24, p->warmup_large);
    put32(hello + 28, p->large_threshold);
    send_all(fd, (const char *)hello, sizeof hello);
    recv_all(fd, (char *)ack, sizeof ack);
    if (get32(ack) != SOCKPP_MAGIC)
        die("the peer is not a sockpp server");
    if (get32(ack + 4) != 0)
        die("the server refused the run (status %" PRIu32 ")", get32(ack + 4));
    if (!server_cpu_known)
        server_cpu = (int)get32(ack + 8);

    struct sockaddr_storage peer, self;
    socklen_t pl = sizeof peer, sl = sizeof self;
    char peer_s[64] = "?", self_s[64] = "?";
    if (getpeername(fd, (struct sockaddr *)&peer, &pl) == 0)
        addr_str((struct sockaddr *)&peer, peer_s, sizeof peer_s);
    if (getsockname(fd, (struct sockaddr *)&self, &sl) == 0)
        addr_str((struct sockaddr *)&self, self_s, sizeof self_s);
    struct utsname u;
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    uname(&u);
    char cpu_c[32], cpu_s[32];
    if (o->cpu_a >= 0)
        snprintf(cpu_c, sizeof cpu_c, "cpu %d (pinned)", o->cpu_a);
    else
        snprintf(cpu_c, sizeof cpu_c, "unpinned");
    if (server_cpu >= 0)
        snprintf(cpu_s, sizeof cpu_s, "cpu %d (pinned)", server_cpu);
    else
        snprintf(cpu_s, sizeof cpu_s, "unpinned");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    printf("# sockpp: bare TCP ping-pong, busy-polling, TCP_NODELAY, non-blocking\n");
    printf("# host %s, %s %s, %ld online cpus\n", host, u.sysname, u.release, ncpu);
    printf("# client %s -> server %s\n", self_s, peer_s);
    printf("# placement: client %s, server %s\n", cpu_c, cpu_s);
    printf("# iterations: %" PRIu32 " (+%" PRIu32 " warm-up) up to %u B, %" PRIu32 " (+%" PRIu32
           " warm-up) above\n",
           p->iters, p->warmup, p->large_threshold, p->iters_large, p->warmup_large);
    printf("# socket buffers: %s; 0 B row moves a 1-byte token\n",
           o->sockbuf > 0 ? "set by --sockbuf" : "kernel autotuning");
    if (o->epoll_sets > 0)
        printf("# connection added to %d epoll sets at each end (--epoll-sets)\n", o->epoll_sets);
    printf("# latency = one-way (round trip / 2); bandwidth = size / latency, MB/s = 10^6 B/s\n");
    printf("%12s %12s %16s\n", "size_bytes", "latency_us", "bandwidth_MBps");
    fflush(stdout);

    char *sbuf = alloc_buf(p->max_size), *rbuf = alloc_buf(p->max_size);
    for (size_t i = 0; i < (p->max_size ? p->max_size : 1); i++)
        sbuf[i] = (char)(i * 131 + 7);
    for (size_t size = 0; size <= p->max_size; size = size ? size * 2 : 1) {
        size_t wire = size ? size : 1;
        uint32_t warmup, iters;
        counts_for(p, size, &warmup, &iters);
        double t0 = 0;
        for (uint32_t i = 0; i < warmup + iters; i++) {
            if (i == warmup)
                t0 = now_us();
            send_all(fd, sbuf, wire);
            recv_all(fd, rbuf, wire);
        }
        double lat = (now_us() - t0) / (2.0 * iters);
        if (memcmp(sbuf, rbuf, wire) != 0)
            die("data corrupted at size %zu", size);
        memset(rbuf, 0, wire);
        printf("%12zu %12.2f %16.1f\n", size, lat, size ? (double)size / lat : 0.0);
        fflush(stdout);
    }
    free(sbuf);
    free(rbuf);
}

/* ---- sockets ------------------------------------------------------------------------ */

static int listen_on(const char *bind_addr, const char *port, int family, struct sockaddr_storage *bound)
{
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int rc = getaddrinfo(bind_addr, port, &hints, &res);
    if (rc != 0)
        die("cannot resolve bind address %s port %s: %s", bind_addr ? bind_addr : "(any)", port,
            gai_strerror(rc));
    /* With no address, prefer an IPv6 dual-stack socket, which also takes IPv4 clients. */
    int prefer_v6 = !bind_addr && family == AF_UNSPEC;
    int fd = -1, err = EADDRNOTAVAIL;
    for (int pass = 0; pass < (prefer_v6 ? 2 : 1) && fd < 0; pass++) {
        for (ai = res; ai && fd < 0; ai = ai->ai_next) {
            if (prefer_v6 && (pass == 0) != (ai->ai_family == AF_INET6))
                continue;
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0) {
                err = errno;
                continue;
            }
            int one = 1, zero = 0;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (prefer_v6 && ai->ai_family == AF_INET6)
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 4) != 0) {
                err = errno;
                close(fd);
                fd = -1;
            }
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        die("cannot listen on %s port %s: %s", bind_addr ? bind_addr : "(any)", port, strerror(err));
    socklen_t len = sizeof *bound;
    if (getsockname(fd, (struct sockaddr *)bound, &len) != 0)
        die("getsockname: %s", strerror(errno));
    return fd;
}

static int connect_to(const char *host, const char *port, int family)
{
    struct addrinfo hints = {0}, *res, *ai;
    hints.ai_family = family;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0)
        die("cannot resolve %s port %s: %s", host, port, gai_strerror(rc));
    int fd = -1, err = EHOSTUNREACH;
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        die("cannot connect to %s port %s: %s", host, port, strerror(err));
    return fd;
}

static int accept_one(int lfd)
{
    int fd;
    do {
        fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        die("accept: %s", strerror(errno));
    return fd;
}

/* ---- modes -------------------------------------------------------------------------- */

static int run_pair(struct opts *o)
{
    int family = o->family == AF_INET6 ? AF_INET6 : AF_INET;
    struct sockaddr_storage bound;
    int lfd = listen_on(family == AF_INET6 ? "::1" : "127.0.0.1", "0", family, &bound);
    char port[16];
    snprintf(port, sizeof port, "%u",
             ntohs(family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                      : ((struct sockaddr_in *)&bound)->sin_port));
    fflush(stdout);
    pid_t child = fork();
    if (child < 0)
        die("fork: %s", strerror(errno));
    if (child == 0) {
        role = " (server)";
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the timing side */
        if (getppid() == 1)
            _exit(2);
        pin(o->cpu_b);
        int fd = accept_one(lfd);
        close(lfd);
        tune_socket(fd, o);
        serve(fd, o);
        close(fd);
        _exit(0);
    }
    role = " (client)";
    close(lfd);
    pin(o->cpu_a);
    int fd = connect_to(family == AF_INET6 ? "::1" : "127.0.0.1", port, family);
    tune_socket(fd, o);
    drive(fd, o, 1, o->cpu_b);
    close(fd);
    int status;
    if (waitpid(child, &status, 0) < 0)
        die("waitpid: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the server end failed (status %d)", status);
    return 0;
}

static int run_server(struct opts *o, int loop)
{
    role = " server";
    pin(o->cpu_a);
    struct sockaddr_storage bound;
    int lfd = listen_on(o->bind, o->port, o->family, &bound);
    char addr[64];
    fprintf(stderr, "sockpp server: listening on %s\n", addr_str((struct sockaddr *)&bound, addr, sizeof addr));
    do {
        int fd = accept_one(lfd);
        alarm(o->timeout);
        tune_socket(fd, o);
        serve(fd, o);
        alarm(0);
        close(fd);
    } while (loop);
    close(lfd);
    return 0;
}

static int run_client(struct opts *o, const char *host, const char *port)
{
    role = " client";
    pin(o->cpu_a);
    alarm(o->timeout);
    int fd = connect_to(host, port, o->family);
    tune_socket(fd, o);
    drive(fd, o, 0, -1);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {
        .p = {4u << 20, LARGE_THRESHOLD, DEF_ITERS, UNSET, UNSET, UNSET},
        .family = AF_UNSPEC,
        .cpu_a = -1,
        .cpu_b = -1,
        .sockbuf = 0,
        .epoll_sets = 0,
        .timeout = 600,
        .bind = NULL,
        .port = DEFAULT_PORT,
    };
    enum { NONE, PAIR, SERVER, CLIENT } mode = NONE;
    const char *pos[2] = {NULL, NULL};
    int npos = 0, loop = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEED_ARG() \
    do { \
        if (i + 1 >= argc) \
            die("%s needs an argument (see --help)", a); \
    } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--pair") || !strcmp(a, "pair")) {
            mode = PAIR;
        } else if (!strcmp(a, "server") && mode == NONE) {
            mode = SERVER;
        } else if (!strcmp(a, "client") && mode == NONE) {
            mode = CLIENT;
        } else if (!strcmp(a, "-4")) {
            o.family = AF_INET;
        } else if (!strcmp(a, "-6")) {
            o.family = AF_INET6;
        } else if (!strcmp(a, "--quick")) {
            o.p.iters = 1000;
        } else if (!strcmp(a, "--loop")) {
            loop = 1;
        } else if (!strcmp(a, "--iters")) {
            NEED_ARG();
            o.p.iters = (uint32_t)parse_num(a, argv[++i], UINT32_MAX / 2);
        } else if (!strcmp(a, "--warmup")) {
            NEED_ARG();
            o.p.warmup = (uint32_t)parse_num(a, argv[++i], UINT32_MAX / 2);
        } else if (!strcmp(a, "--iters-large")) {
            NEED_ARG();
            o.p.iters_large = (uint32_t)parse_num(a, argv[++i], UINT32_MAX / 2);
        } else if (!strcmp(a, "--warmup-large")) {
            NEED_ARG();
            o.p.warmup_large = (uint32_t)parse_num(a, argv[++i], UINT32_MAX / 2);
        } else if (!strcmp(a, "--max-size") || !strcmp(a, "--max")) {
            NEED_ARG();
            o.p.max_size = (uint32_t)parse_num(a, argv[++i], MAX_SIZE_LIMIT);
            if (o.p.max_size & (o.p.max_size - 1))
                die("--max-size must be 0 or a power of two");
        } else if (!strcmp(a, "--cpu")) {
            NEED_ARG();
            parse_cpus(&o, argv[++i]);
        } else if (!strcmp(a, "--sockbuf")) {
            NEED_ARG();
            o.sockbuf = (int)parse_num(a, argv[++i], INT_MAX / 2);
        } else if (!strcmp(a, "--epoll-sets")) {
            NEED_ARG();
            o.epoll_sets = (int)parse_num(a, argv[++i], 64);
        } else if (!strcmp(a, "--timeout")) {
            NEED_ARG();
            o.timeout = (unsigned)parse_num(a, argv[++i], 1u << 30);
        } else if (!strcmp(a, "--bind")) {
            NEED_ARG();
            o.bind = argv[++i];
        } else if (!strcmp(a, "--port")) {
            NEED_ARG();
            o.port = argv[++i];
            parse_num("--port", o.port, 65535);
        } else if (a[0] == '-' && a[1] != 0) {
            die("unknown option '%s' (see --help)", a);
        } else if (npos < 2) {
            pos[npos++] = a;
        } else {
            die("unexpected argument '%s' (see --help)", a);
        }
#undef NEED_ARG
    }
    /* Derived counts, as the pingpong example derives them. */
#define TENTH_AT_LEAST(n, min) ((n) / 10 > (min) ? (n) / 10 : (min))
    if (o.p.iters_large == UNSET)
        o.p.iters_large = TENTH_AT_LEAST(o.p.iters, 100u);
    if (o.p.warmup == UNSET)
        o.p.warmup = TENTH_AT_LEAST(o.p.iters, 10u);
    if (o.p.warmup_large == UNSET)
        o.p.warmup_large = TENTH_AT_LEAST(o.p.iters_large, 10u);
    if (o.p.iters == 0 || o.p.iters_large == 0)
        die("--iters and --iters-large must be at least 1");

    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);

    switch (mode) {
    case PAIR:
        if (npos)
            die("--pair takes no host or port");
        if (o.cpu_a >= 0 && o.cpu_a == o.cpu_b)
            fprintf(stderr, "sockpp: warning: both busy-polling ends pinned to cpu %d: they take turns "
                            "on one cpu, so latency measures the scheduler, not the socket\n", o.cpu_a);
        alarm(o.timeout);
        return run_pair(&o);
    case SERVER:
        if (npos)
            die("server takes no positional arguments (use --bind/--port)");
        if (o.cpu_a != o.cpu_b)
            die("server: --cpu takes one cpu");
        return run_server(&o, loop);
    case CLIENT:
        if (npos != 2)
            die("client needs HOST and PORT");
        if (o.cpu_a != o.cpu_b)
            die("client: --cpu takes one cpu");
        return run_client(&o, pos[0], pos[1]);
    default:
        usage(stderr);
        return 2;
    }
}
