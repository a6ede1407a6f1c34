/*
 * ethpp — bare raw-Ethernet anchor: a busy-polling AF_PACKET ping-pong with no MPI and
 * no pontoon code, as sockpp is for TCP: what the kernel's packet path itself costs on
 * an L2 segment, so that pontoon's eth lanes can be quoted against it in the same run.
 *
 * Method (sockpp's and osu_latency's): for each size 0, 1, 2, 4 ... max, warm-up round
 * trips, then timed ones; one-way latency = elapsed / (2 * iterations). A message of
 * more than one frame's payload is cut into frames of the interface's MTU; the server
 * echoes every frame, the client waits for all of a message's echoes. No reliability:
 * a lost frame stalls the run (it then fails after 5 s). EtherType 0x88B6, so that a
 * pontoon job on the same segment (0x88B5) is not disturbed.
 *
 *   ethpp server IFACE                         echoes frames until killed
 *   ethpp client IFACE [--max N] [--iters N]   finds the server by broadcast, prints
 *                                              "bytes  one-way-us  MB/s" per size
 *
 * Needs CAP_NET_RAW. Plain C11 + Linux; build with `make -C bench`.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ETHERTYPE 0x88B6
#define HDR 14
#define SEQ 8 /* message sequence (4), frame index (2), frames in message (2) */

static int sock_fd;
static int ifindex;
static unsigned char my_mac[6];
static int mtu;

static void die(const char *what) {
    perror(what);
    exit(1);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void open_socket(const char *ifname) {
    sock_fd = socket(AF_PACKET, SOCK_RAW, htons(ETHERTYPE));
    if (sock_fd < 0) die("socket(AF_PACKET) (needs CAP_NET_RAW)");
    struct ifreq req;
    memset(&req, 0, sizeof req);
    snprintf(req.ifr_name, sizeof req.ifr_name, "%s", ifname);
    if (ioctl(sock_fd, SIOCGIFINDEX, &req) < 0) die("SIOCGIFINDEX");
    ifindex = req.ifr_ifindex;
    if (ioctl(sock_fd, SIOCGIFHWADDR, &req) < 0) die("SIOCGIFHWADDR");
    memcpy(my_mac, req.ifr_hwaddr.sa_data, 6);
    if (ioctl(sock_fd, SIOCGIFMTU, &req) < 0) die("SIOCGIFMTU");
    mtu = req.ifr_mtu;
    struct sockaddr_ll sll;
    memset(&sll, 0, sizeof sll);
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETHERTYPE);
    sll.sll_ifindex = ifindex;
    if (bind(sock_fd, (struct sockaddr *)&sll, sizeof sll) < 0) die("bind");
}

static void send_frame(unsigned char *f, size_t len, const unsigned char *to) {
    memcpy(f, to, 6);
    memcpy(f + 6, my_mac, 6);
    f[12] = ETHERTYPE >> 8;
    f[13] = ETHERTYPE & 0xff;
    if (len < 60) len = 60;
    while (send(sock_fd, f, len, MSG_DONTWAIT) < 0) {
        if (errno != EAGAIN && errno != ENOBUFS) die("send");
    }
}

/* Busy-polls for one frame; returns its length (0 after `limit` seconds). */
static ssize_t recv_frame(unsigned char *f, size_t cap, double limit) {
    double until = limit > 0 ? now_s() + limit : 0;
    for (unsigned spins = 0;; spins++) {
        ssize_t n = recv(sock_fd, f, cap, MSG_DONTWAIT);
        if (n >= 0) return n;
        if (errno != EAGAIN) die("recv");
        if (until > 0 && (spins & 1023) == 0 && now_s() > until) return 0;
    }
}

static void server(void) {
    static unsigned char f[65536];
    for (;;) {
        ssize_t n = recv_frame(f, sizeof f, 0);
        unsigned char from[6];
        memcpy(from, f + 6, 6);
        send_frame(f, (size_t)n, from);
    }
}

/* One message of `size` bytes there and back: its frames, then all their echoes. */
static int round_trip(unsigned char *f, unsigned char *g, const unsigned char *peer, uint32_t msg, uint32_t size) {
    uint32_t room = (uint32_t)mtu - SEQ;
    uint16_t frames = size == 0 ? 1 : (uint16_t)((size + room - 1) / room);
    for (uint16_t i = 0; i < frames; i++) {
        uint32_t len = size - i * room < room ? size - i * room : room;
        if (size == 0) len = 0;
        memcpy(f + HDR, &msg, 4);
        memcpy(f + HDR + 4, &i, 2);
        memcpy(f + HDR + 6, &frames, 2);
        send_frame(f, HDR + SEQ + len, peer);
    }
    for (uint16_t got = 0; got < frames;) {
        ssize_t n = recv_frame(g, 65536, 5.0);
        if (n == 0) return -1;
        uint32_t m;
        memcpy(&m, g + HDR, 4);
        if (m == msg) got++;
    }
    return 0;
}

static void client(uint32_t max, uint32_t iters) {
    static unsigned char f[65536], g[65536];
    unsigned char peer[6];
    static const unsigned char broadcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    /* Find the server: a broadcast that it echoes from its own MAC. The server may still be
     * starting, so the hello is repeated every 100 ms; late echoes of it carry a message
     * number no round trip uses, so they are ignored. */
    memset(f, 0, sizeof f);
    uint32_t hello = 0xffffffffu;
    memcpy(f + HDR, &hello, 4);
    int answered = 0;
    for (int tries = 0; tries < 50 && !answered; tries++) {
        send_frame(f, 60, broadcast);
        answered = recv_frame(g, sizeof g, 0.1) != 0;
    }
    if (!answered) {
        fprintf(stderr, "ethpp: no server answered on this segment within 5 s\n");
        exit(1);
    }
    memcpy(peer, g + 6, 6);
    printf("# ethpp: one-way latency (us) and ping-pong bandwidth (MB/s), MTU %d\n", mtu);
    printf("%10s %12s %12s\n", "bytes", "latency_us", "MB/s");
    uint32_t msg = 0;
    for (uint64_t size = 0; size <= max; size = size ? size * 2 : 1) {
        uint32_t n = size > 65536 ? (iters / 10 > 100 ? iters / 10 : 100) : iters;
        uint32_t warm = n / 10 > 10 ? n / 10 : 10;
        for (uint32_t i = 0; i < warm; i++)
            if (round_trip(f, g, peer, msg++, (uint32_t)size) < 0) goto lost;
        double t0 = now_s();
        for (uint32_t i = 0; i < n; i++)
            if (round_trip(f, g, peer, msg++, (uint32_t)size) < 0) goto lost;
        double one_way = (now_s() - t0) / (2.0 * n);
        printf("%10llu %12.2f %12.1f\n", (unsigned long long)size, one_way * 1e6, size / one_way / 1e6);
        fflush(stdout);
    }
    return;
lost:
    fprintf(stderr, "ethpp: a frame was lost (no echo within 5 s): the segment drops frames\n");
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ethpp server IFACE | ethpp client IFACE [--max N] [--iters N]\n");
        return 2;
    }
    open_socket(argv[2]);
    if (strcmp(argv[1], "server") == 0) {
        server();
        return 0;
    }
    uint32_t max = 1u << 22, iters = 10000;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--max") == 0) max = (uint32_t)strtoul(argv[i + 1], NULL, 0);
        else if (strcmp(argv[i], "--iters") == 0) iters = (uint32_t)strtoul(argv[i + 1], NULL, 0);
    }
    client(max, iters);
    return 0;
}
