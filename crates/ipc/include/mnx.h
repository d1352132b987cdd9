/* mnx.h — C API of ustack-ipc: Minix-3-style message passing between Linux processes,
 * with the M3-IPC names. Link with -lustack_ipc (shared) or libustack_ipc.a (static, plus
 * -lpthread -ldl -lm).
 *
 * Every call returns 0 (mnx_bind: the endpoint number, >= 0) on success and a negative
 * MNX_E* code on error. Each thread binds its own endpoint with mnx_bind; the other calls
 * act on the calling thread's endpoint. */
#ifndef MNX_H
#define MNX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MNX_ANY (-1)

/* Error codes (negative). */
#define MNX_EBADEP      (-1)   /* bad endpoint */
#define MNX_ENOTSAMEDC  (-2)   /* endpoint not in the same domain */
#define MNX_EDEADEP     (-3)   /* dead endpoint */
#define MNX_EDCENDED    (-4)   /* domain ended */
#define MNX_EAGAIN      (-5)   /* would block */
#define MNX_ETIMEDOUT   (-6)   /* timed out */
#define MNX_EFAULT      (-7)   /* bad address range */
#define MNX_E2BIG       (-8)   /* too large */
#define MNX_ENODC       (-9)   /* no such domain */
#define MNX_EDCEXIST    (-10)  /* domain already exists */
#define MNX_EDCFULL     (-11)  /* domain full */
#define MNX_EEPINUSE    (-12)  /* endpoint already in use */
#define MNX_EINVAL      (-13)  /* invalid argument */
#define MNX_EPERM       (-14)  /* permission denied */
#define MNX_ECORRUPT    (-15)  /* corrupt domain segment */
#define MNX_EARENAFULL  (-16)  /* no room in the domain arena */
/* OS errors: -1000 - errno */

/* Message kinds (m_kind, filled in by the IPC). */
#define MNX_KIND_SEND    1
#define MNX_KIND_SENDREC 2
#define MNX_KIND_NOTIFY  3

/* Wait modes. */
#define MNX_WAIT_ADAPTIVE 0
#define MNX_WAIT_SPIN     1
#define MNX_WAIT_BLOCK    2

/* A message: one 64-byte cache line. m_source and m_kind are filled in by the IPC. */
typedef struct {
    int32_t m_source;
    uint8_t m_kind;
    uint8_t m_flags;
    uint16_t m_type;
    uint8_t m_payload[56];
} __attribute__((aligned(64))) mnx_message_t;

int mnx_dc_init(const char *name, int max_endpoints);
int mnx_dc_end(const char *name);
int mnx_bind(const char *name, int endpoint); /* endpoint: slot number or MNX_ANY */
int mnx_unbind(int endpoint);
int mnx_getep(void);
int mnx_set_waitmode(int mode); /* 0 adaptive, 1 spin, 2 block */
/* Block mode: hand-off replies to sendrec (Linux >= 6.6; the thread installs a seccomp
 * filter, which needs CAP_SYS_ADMIN or no_new_privs, cannot be removed, costs each of the
 * thread's system calls a BPF run, and keeps children it forks from installing seccomp
 * user-notification filters of their own while it is in use). 1: on, 0: this thread
 * cannot (it keeps using its doorbells), < 0: error. USTACK_IPC_HANDOFF=1 in the
 * environment turns it on for every endpoint bound from then on. */
int mnx_set_handoff(int on);

int mnx_send(int dst, const mnx_message_t *m);
int mnx_receive(int src, mnx_message_t *m);
int mnx_sendrec(int dst, mnx_message_t *m);
int mnx_notify(int dst);
int mnx_vcopy(int src_ep, const void *src_addr, int dst_ep, void *dst_addr, size_t len);

/* Arena buffers: memory of the calling thread's domain, mapped in every process of the
 * domain (64 KiB granules). mnx_vcopy between two arena buffers is a single memcpy; other
 * copies go through the kernel (process_vm_readv/writev). A buffer is freed by mnx_free
 * in the process that allocated it, or when that process exits.
 * Errors: MNX_EINVAL (len 0), MNX_E2BIG (larger than the arena), MNX_EARENAFULL. */
int mnx_alloc(size_t len, void **ptr);
int mnx_free(void *ptr);

/* Timeout variants: timeout_ms < 0 waits forever, 0 is non-blocking (MNX_EAGAIN). */
int mnx_send_T(int dst, const mnx_message_t *m, long timeout_ms);
int mnx_receive_T(int src, mnx_message_t *m, long timeout_ms);
int mnx_sendrec_T(int dst, mnx_message_t *m, long timeout_ms);

const char *mnx_strerror(int code);

#ifdef __cplusplus
}
#endif
#endif /* MNX_H */
