/* pingpong.c — C example of ustack-ipc: a server process and a client process in one
 * domain doing sendrec round trips, a notification, vcopies (private memory and arena
 * buffers) and error checks.
 * Usage: pingpong [domain-name] [round-trips]. Exit status 0 on success. */
#include "mnx.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(x) do { int r_ = (x); if (r_ < 0) { fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #x, mnx_strerror(r_)); return 1; } } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int server(const char *dc, int n) {
    static char buf[65536];
    mnx_message_t m;
    if (mnx_getep() != MNX_EBADEP) return 5; /* the parent's binding is not ours */
    int me = mnx_bind(dc, 1);
    CHECK(me);
    /* A second buffer in the domain arena (vcopy between arena buffers is a memcpy). */
    unsigned char *abuf = NULL;
    CHECK(mnx_alloc(sizeof buf, (void **)&abuf));
    /* Tell the client where our buffers are. */
    memset(&m, 0, sizeof m);
    m.m_type = 10;
    uint64_t addr = (uint64_t)(uintptr_t)buf;
    memcpy(m.m_payload, &addr, 8);
    addr = (uint64_t)(uintptr_t)abuf;
    memcpy(m.m_payload + 8, &addr, 8);
    int r;
    while ((r = mnx_send(0, &m)) == MNX_EBADEP) usleep(1000); /* until the client is bound */
    CHECK(r);
    for (int i = 0; i < 2 * n; i++) { /* n round trips in the default mode, n in block mode */
        CHECK(mnx_receive(MNX_ANY, &m));
        if (m.m_kind != MNX_KIND_SENDREC) return 2;
        uint64_t v;
        memcpy(&v, m.m_payload, 8);
        v += 1;
        memcpy(m.m_payload, &v, 8);
        CHECK(mnx_send(m.m_source, &m));
    }
    /* A notification, then the checksums of what the client copied into buf and abuf. */
    CHECK(mnx_receive(MNX_ANY, &m));
    if (m.m_kind != MNX_KIND_NOTIFY) return 3;
    uint64_t sum = 0, asum = 0;
    for (size_t i = 0; i < sizeof buf; i++) sum += (unsigned char)buf[i];
    for (size_t i = 0; i < sizeof buf; i++) asum += abuf[i];
    memset(&m, 0, sizeof m);
    memcpy(m.m_payload, &sum, 8);
    memcpy(m.m_payload + 8, &asum, 8);
    CHECK(mnx_send(0, &m));
    CHECK(mnx_free(abuf));
    if (mnx_free(abuf) != MNX_EINVAL) return 4; /* freed already */
    CHECK(mnx_unbind(me));
    return 0;
}

/* n sendrec round trips with srv, each checking the server's reply (request + 1). */
static int round_trips(int srv, int n) {
    mnx_message_t m;
    for (uint64_t i = 0; i < (uint64_t)n; i++) {
        memset(&m, 0, sizeof m);
        memcpy(m.m_payload, &i, 8);
        CHECK(mnx_sendrec(srv, &m));
        uint64_t v;
        memcpy(&v, m.m_payload, 8);
        if (v != i + 1 || m.m_source != srv) { fprintf(stderr, "bad reply\n"); return 1; }
    }
    return 0;
}

int main(int argc, char **argv) {
    char dc[64];
    snprintf(dc, sizeof dc, "%s", argc > 1 ? argv[1] : "c-pingpong");
    int n = argc > 2 ? atoi(argv[2]) : 100000;
    CHECK(mnx_dc_init(dc, 8));
    /* Bind before forking: the child does not inherit the binding and binds its own. */
    int me = mnx_bind(dc, 0);
    CHECK(me);
    pid_t pid = fork();
    if (pid == 0) _exit(server(dc, n));

    mnx_message_t m;
    CHECK(mnx_receive(MNX_ANY, &m));
    int srv = m.m_source;
    uint64_t remote, remote_arena;
    memcpy(&remote, m.m_payload, 8);
    memcpy(&remote_arena, m.m_payload + 8, 8);

    double t0 = now();
    if (round_trips(srv, n)) return 1;
    double dt = now() - t0;
    printf("%d sendrec round trips in %.3f s: %.0f round trips/s (%.2f us each)\n", n, dt, n / dt, dt / n * 1e6);

    /* The same in block mode with hand-off replies, where this thread may use them. */
    CHECK(mnx_set_waitmode(2));
    int handoff = mnx_set_handoff(1);
    CHECK(handoff);
    t0 = now();
    if (round_trips(srv, n)) return 1;
    dt = now() - t0;
    printf("%d block-mode sendrec round trips%s in %.3f s: %.2f us each\n", n,
           handoff ? " with hand-offs" : " (no hand-offs here)", dt, dt / n * 1e6);

    /* vcopy (COPY1: we are the source) into the server's buffer, then notify it. */
    static char local[65536];
    uint64_t want = 0;
    for (size_t i = 0; i < sizeof local; i++) { local[i] = (char)(i % 7 + 1); want += (unsigned char)local[i]; }
    CHECK(mnx_vcopy(me, local, srv, (void *)(uintptr_t)remote, sizeof local));
    /* The same block from an arena buffer of ours into the server's arena buffer. */
    char *alocal = NULL;
    CHECK(mnx_alloc(sizeof local, (void **)&alocal));
    memcpy(alocal, local, sizeof local);
    CHECK(mnx_vcopy(me, alocal, srv, (void *)(uintptr_t)remote_arena, sizeof local));
    CHECK(mnx_free(alocal));
    void *dummy;
    if (mnx_alloc(0, &dummy) != MNX_EINVAL) { fprintf(stderr, "expected EINVAL\n"); return 1; }
    if (mnx_alloc((size_t)1 << 40, &dummy) != MNX_E2BIG) { fprintf(stderr, "expected E2BIG\n"); return 1; }
    /* A bad remote address is an error value, not a crash of either process. */
    if (mnx_vcopy(me, local, srv, (void *)16, 64) != MNX_EFAULT) { fprintf(stderr, "expected EFAULT\n"); return 1; }
    CHECK(mnx_notify(srv));
    CHECK(mnx_receive(srv, &m));
    uint64_t got, agot;
    memcpy(&got, m.m_payload, 8);
    memcpy(&agot, m.m_payload + 8, 8);
    if (got != want) { fprintf(stderr, "vcopy checksum %llu != %llu\n", (unsigned long long)got, (unsigned long long)want); return 1; }
    if (agot != want) { fprintf(stderr, "arena vcopy checksum %llu != %llu\n", (unsigned long long)agot, (unsigned long long)want); return 1; }
    printf("vcopy of %zu bytes verified (private and arena buffers)\n", sizeof local);

    /* Errors are values. */
    if (mnx_send(me, &m) != MNX_EBADEP) { fprintf(stderr, "send to self should fail\n"); return 1; }
    if (mnx_receive_T(MNX_ANY, &m, 0) != MNX_EAGAIN) { fprintf(stderr, "expected EAGAIN\n"); return 1; }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { fprintf(stderr, "server failed (%d)\n", st); return 1; }
    CHECK(mnx_unbind(me));
    CHECK(mnx_dc_end(dc));
    printf("ok\n");
    return 0;
}
