// handoff.c - how fast is a sleeping round trip between two processes when the kernel
// hands the CPU over, instead of waking the peer wherever the scheduler likes? The bare
// mechanism behind ustack-ipc's Block-mode hand-off replies (`Endpoint::set_handoff`; see
// crates/ipc/README.md).
//
//   gcc -O2 -Wall -o handoff handoff.c
//   ./handoff [rounds] [round_trips]       -> per round: unotify (4 variants), pipe; medians
//
// The only kernel wake-up that puts the woken task on the waker's CPU (WF_CURRENT_CPU) is
// seccomp user notification with SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP (Linux 6.6). The client
// (the "target") installs a filter that makes one unused system call number trap to a
// listener; the server (the "supervisor") takes the listener with pidfd_getfd. A round trip
// is then: client traps (sleeps; wakes the server on the client's CPU), server receives the
// notification and answers it (wakes the client on the server's CPU), and sleeps in the next
// receive. Both sides sleep in the kernel; nothing spins.
//
// Variants: sync = SYNC_WAKE_UP on/off; poll = the server sleeps in poll() on the listener
// before each receive (as a server that also waits for other things must); reply-only =
// the request still goes through a pipe doorbell (the server sleeps in read() on it) and
// only the reply is a hand-off (the server answers the client's trap).
// Costs a real design has to take: the client needs no_new_privs (or CAP_SYS_ADMIN) to
// install a filter, filters cannot be removed and are inherited by children, and only the
// holder of a listener can wake a target.
#define _GNU_SOURCE
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tool_util.h"

#ifndef SECCOMP_IOCTL_NOTIF_SET_FLAGS
#define SECCOMP_IOCTL_NOTIF_SET_FLAGS SECCOMP_IOW(4, __u64)
#endif
#define SYNC_WAKE_UP 1UL
#define TRAP_NR 1023  // an unused system call number


struct shm {
    volatile int lfd, ready, scpu;
};

static cpu_set_t all_cpus;  // the affinity we started with, restored after each run

static void pin0(void) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(0, &s);
    if (sched_setaffinity(0, sizeof s, &s)) die("sched_setaffinity");
}

static void unpin(void) {
    if (sched_setaffinity(0, sizeof all_cpus, &all_cpus)) die("sched_setaffinity");
}

// One run: returns µs per round trip; *same = fraction with both on one CPU.
// usepoll: 0 = the server sleeps in NOTIF_RECV, 1 = in poll() first, 2 = reply-only.
static double unotify(int n, int one_cpu, int sync, int usepoll, double *same) {
    struct shm *sh = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    double *res = (double *)((char *)sh + 256);
    int bell[2] = {-1, -1};
    char b = 0;
    if (sh == MAP_FAILED) die("mmap");
    if (usepoll == 2 && pipe(bell)) die("pipe");
    pid_t ch = fork();
    if (ch < 0) die("fork");
    if (ch == 0) {
        if (one_cpu) pin0();
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TRAP_NR, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog p = {4, f};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) die("no_new_privs");
        int lfd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &p);
        if (lfd < 0) die("seccomp");
        sh->lfd = lfd;
        __atomic_store_n(&sh->ready, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) != 2) {
        }
        long s = 0;
        double t0 = now_s();
        for (int i = 0; i < n; i++) {
            if (usepoll == 2 && write(bell[1], &b, 1) != 1) die("doorbell write");
            if (syscall(TRAP_NR) != 0) die("trap");
            s += sh->scpu == sched_getcpu();
        }
        res[0] = (now_s() - t0) / n * 1e6;
        res[1] = (double)s / n;
        _exit(0);
    }
    if (one_cpu) pin0();
    if (bell[1] >= 0) close(bell[1]);  // so that the read sees end-of-file when the client exits
    while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) != 1) {
    }
    int pfd = syscall(SYS_pidfd_open, ch, 0);
    int lfd = pfd < 0 ? -1 : syscall(SYS_pidfd_getfd, pfd, sh->lfd, 0);
    if (lfd < 0) die("pidfd_getfd");
    if (sync && ioctl(lfd, SECCOMP_IOCTL_NOTIF_SET_FLAGS, SYNC_WAKE_UP, 0) < 0) die("NOTIF_SET_FLAGS");
    __atomic_store_n(&sh->ready, 2, __ATOMIC_SEQ_CST);
    struct seccomp_notif req;
    struct seccomp_notif_resp resp;
    for (;;) {
        if (usepoll == 2) {
            // Woken by the doorbell; the trap follows at once: wait for it without sleeping
            // on the listener (else the trap itself would hand the CPU over).
            if (read(bell[0], &b, 1) != 1) break;  // the client exited
            struct pollfd pf = {lfd, POLLIN, 0};
            while (poll(&pf, 1, 0) == 0) sched_yield();  // the client may share our CPU
            if (pf.revents & (POLLHUP | POLLERR)) break;
        } else if (usepoll) {
            struct pollfd pf = {lfd, POLLIN, 0};
            if (poll(&pf, 1, -1) < 0) continue;
            if (pf.revents & (POLLHUP | POLLERR)) break;  // the client exited
        }
        memset(&req, 0, sizeof req);
        if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_RECV, &req) < 0) {
            if (errno == EINTR) continue;
            break;  // the client exited
        }
        sh->scpu = sched_getcpu();
        memset(&resp, 0, sizeof resp);
        resp.id = req.id;
        if (ioctl(lfd, SECCOMP_IOCTL_NOTIF_SEND, &resp) < 0 && errno != ENOENT) break;
    }
    waitpid(ch, NULL, 0);
    unpin();
    if (bell[0] >= 0) close(bell[0]);
    close(lfd);
    close(pfd);
    double us = res[0];
    *same = res[1];
    munmap(sh, 4096);
    return us;
}

// The same round trip over two pipes (one byte each way).
static double pipes(int n, int one_cpu) {
    int a[2], b[2];
    char c = 0;
    if (pipe(a) || pipe(b)) die("pipe");
    pid_t ch = fork();
    if (ch < 0) die("fork");
    if (one_cpu) pin0();
    if (ch == 0) {
        close(a[1]);
        close(b[0]);
        while (read(a[0], &c, 1) == 1)
            if (write(b[1], &c, 1) != 1) break;
        _exit(0);
    }
    close(a[0]);
    close(b[1]);
    double t0 = now_s();
    for (int i = 0; i < n; i++)
        if (write(a[1], &c, 1) != 1 || read(b[0], &c, 1) != 1) die("pipe io");
    double us = (now_s() - t0) / n * 1e6;
    close(a[1]);
    close(b[0]);
    waitpid(ch, NULL, 0);
    unpin();
    return us;
}

static int cmp(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5, n = argc > 2 ? atoi(argv[2]) : 20000;
    if (rounds < 1 || rounds > 64 || n < 1) {
        fprintf(stderr, "usage: handoff [rounds 1-64] [round_trips]\n");
        return 2;
    }
    if (sched_getaffinity(0, sizeof all_cpus, &all_cpus)) die("sched_getaffinity");
    const char *name[] = {"unotify sync",         "unotify sync+poll", "unotify no-sync",
                          "unotify no-sync+poll", "unotify reply-only", "pipe"};
    enum { V = 6 };
    for (int one = 1; one >= 0; one--) {
        double us[V][64], same[V][64];
        for (int r = 0; r < rounds; r++) {
            for (int v = 0; v < 4; v++) us[v][r] = unotify(n, one, v < 2, v % 2, &same[v][r]);
            us[4][r] = unotify(n, one, 1, 2, &same[4][r]);
            us[5][r] = pipes(n, one);
            same[5][r] = -1;
        }
        printf("%s (%d rounds of %d round trips, median)\n", one ? "both on CPU 0" : "unpinned", rounds, n);
        for (int v = 0; v < V; v++) {
            double s = 0;
            for (int r = 0; r < rounds; r++) s += same[v][r];
            qsort(us[v], rounds, sizeof(double), cmp);
            printf("  %-22s %8.2f us/rt", name[v], us[v][rounds / 2]);
            if (v < V - 1) printf("   same CPU %.2f", s / rounds);
            printf("\n");
        }
    }
    return 0;
}
