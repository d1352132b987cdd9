// tool_util.h - helpers shared by the stand-alone C diagnostics in this directory
// (wakebench.c, handoff.c); each is built with a plain `gcc -O2 -Wall -o X X.c`.
#ifndef USTACK_IPC_TOOL_UTIL_H
#define USTACK_IPC_TOOL_UTIL_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

// Monotonic time in seconds.
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Print what failed (with errno's text) and exit with status 1.
static inline void die(const char *m) {
    perror(m);
    exit(1);
}
#endif
