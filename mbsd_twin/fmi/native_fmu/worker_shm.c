/* The shared page of the worker link (see worker_shm.h, its layout worker_frames.h): DO_STEP without socket messages.

   Handshake: the writer of a sequence number stores it (sequentially consistent) and wakes the
   other side's futex when that side said it sleeps; the reader spins on the number for
   MBSD_TWIN_FMU_SPIN_US microseconds (default SPIN_US_DEFAULT: none), then sleeps on it in slices
   of SLICE_NS, checking between slices that the worker is still there (end of file on the socket)
   and the reply bound. The futex compare in the kernel closes the race between "it sleeps" and
   "the number changed". Spinning pays where host and worker each have a core: waking a sleeping
   process costs tens of microseconds (on an idle 2-core VM a slider-crank step took 80 us without
   spinning, 12 us with it); where the cores are busy with other work, a spinning side holds the core
   the other side needs. Hence the back-off: a spin that ends without the number changing is
   followed by SPIN_BACKOFF waits without spinning, twice as many after each further spin in vain
   (up to SPIN_BACKOFF_MAX), SPIN_BACKOFF again after a spin that paid (fmu/README.md). */
#define _GNU_SOURCE
#include "worker_shm.h"

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SPIN_US_DEFAULT 50.0
#define SPIN_BACKOFF 16
#define SPIN_BACKOFF_MAX 4096
#define SLICE_NS 2000000L
#define SPIN_ENV "MBSD_TWIN_FMU_SPIN_US"

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

int shm_create(WorkerLink *w) {
    w->shm = NULL; w->shm_fd = -1;
    const char *off = getenv("MBSD_TWIN_FMU_NO_SHM");  /* the socket for every request (comparison, fallback) */
    if (off && *off && strcmp(off, "0")) return -1;
    int fd = memfd_create("mbsd-twin-fmu", MFD_CLOEXEC);
    if (fd < 0) return -1;
    void *p = ftruncate(fd, SHM_SIZE) ? MAP_FAILED : mmap(NULL, SHM_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) { close(fd); return -1; }
    const char *spin = getenv(SPIN_ENV);
    char *end = NULL;
    double us = spin && *spin ? strtod(spin, &end) : SPIN_US_DEFAULT;
    if (spin && *spin && (end == spin || !(us >= 0) || us > 1e6)) us = SPIN_US_DEFAULT;
    w->shm = p; w->shm_fd = fd; w->spin_us = us;
    w->shm->spin_us = (uint32_t)us;
    return 0;
}

void shm_destroy(WorkerLink *w) {
    if (w->shm) munmap(w->shm, SHM_SIZE);
    if (w->shm_fd >= 0) close(w->shm_fd);
    w->shm = NULL; w->shm_fd = -1;
}

static void post(WorkerLink *w, uint32_t kind) {
    ShmHead *h = w->shm;
    h->kind = kind;
    __atomic_store_n(&h->req, h->req + 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&h->worker_waits, __ATOMIC_SEQ_CST)) futex(&h->req, FUTEX_WAKE, 1, NULL);
}

void shm_quit(WorkerLink *w) {
    if (w->shm) post(w, 0);  /* kind 0: the library is gone, the worker returns */
}

/* The worker is gone when the socket shows end of file (it announces every frame it writes). */
static int worker_gone(WorkerLink *w) {
    char c;
    ssize_t r = recv(w->sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Wait until rep != seq: 0, -1 (gone or hung: logged, the worker killed if hung). */
static int await_reply(WorkerLink *w, uint32_t seq, uint32_t op) {
    ShmHead *h = w->shm;
    double start = link_now(), wait = w->timeout > 0 ? w->timeout : LINK_DEFAULT_TIMEOUT;
    double spin_end = start + 1e-6 * w->spin_us;
    if (w->spin_skip) w->spin_skip--;
    else if (w->spin_us > 0) {
        unsigned k = 1;
        for (; __atomic_load_n(&h->rep, __ATOMIC_ACQUIRE) == seq; k++) {
            if ((k & 63) == 0 && link_now() > spin_end) break;
            __builtin_ia32_pause();
        }
        int paid = __atomic_load_n(&h->rep, __ATOMIC_ACQUIRE) != seq;
        if (!w->spin_backoff) w->spin_backoff = SPIN_BACKOFF;
        else if (!paid && w->spin_backoff < SPIN_BACKOFF_MAX) w->spin_backoff *= 2;
        if (paid) w->spin_backoff = SPIN_BACKOFF;
        else w->spin_skip = w->spin_backoff;
    }
    while (__atomic_load_n(&h->rep, __ATOMIC_ACQUIRE) == seq) {
        struct timespec ts = {0, SLICE_NS};
        __atomic_store_n(&h->host_waits, 1, __ATOMIC_SEQ_CST);
        futex(&h->rep, FUTEX_WAIT, seq, &ts);
        __atomic_store_n(&h->host_waits, 0, __ATOMIC_RELAXED);
        if (__atomic_load_n(&h->rep, __ATOMIC_ACQUIRE) != seq) break;
        if (worker_gone(w)) { link_gone(w, op); return -1; }
        if (link_now() - start > wait) { link_hung(w, op, wait); return -1; }
    }
    return 0;
}

static int step(WorkerLink *w, const Request *rq) {
    ShmHead *h = w->shm;
    char *base = (char *)h;
    memcpy(base + SHM_VR, rq->set_vr, 4u * rq->n_set);
    memcpy(base + SHM_VAL, rq->set_val, 8u * rq->n_set);
    h->n_set = rq->n_set; h->flags = rq->flags; h->t = rq->real[0]; h->h = rq->real[1];
    uint32_t seq = h->rep;
    post(w, SHM_STEP);
    if (await_reply(w, seq, rq->op)) return -1;
    if (h->on_socket) return link_read_reply(w, rq->op);  /* it carries log records */
    w->status = (int32_t)h->status;
    w->n_real = h->n_out; w->n_bytes = 0;
    if (8u * h->n_out > w->cap_real) {  /* cap_real: bytes */
        void *p = realloc(w->reals, 8u * h->n_out);
        if (!p) { link_gone(w, rq->op); return -1; }
        w->reals = p; w->cap_real = 8u * h->n_out;
    }
    memcpy(w->reals, base + SHM_OUT, 8u * h->n_out);
    return 0;
}

int shm_call(WorkerLink *w, const Request *rq) {
    if (w->dead) return link_send(w, rq);  /* refused, with the message */
    if (rq->op == OP_DO_STEP && rq->n_real == 2 && rq->n_set <= SHM_MAX) return step(w, rq);
    if (link_send(w, rq)) return -1;
    post(w, SHM_SOCKET);
    return link_read_reply(w, rq->op);
}
