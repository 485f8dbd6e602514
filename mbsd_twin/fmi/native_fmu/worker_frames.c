/* Framed I/O over the worker link's socket, and how a worker that is gone or hung ends the
   instance (see worker_frames.h): used by the worker's start-up and calls (worker_link.c) and by the
   shared page (worker_shm.c). */
#define _GNU_SOURCE
#include "worker_frames.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void link_logf(WorkerLink *w, int status, const char *fmt, ...) {
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (w->log) w->log(w->log_ctx, status, text);
}

/* As link_logf, and on stderr too: hosts such as Ecos show the FMI log only at debug level, and a worker
   that cannot start or is gone must not go unexplained. */
void link_alert(WorkerLink *w, link_log_fn log, int status, const char *fmt, ...) {
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (log) log(w->log_ctx, status, text);
    fprintf(stderr, "mbsd-twin FMU: %s\n", text);
    fflush(stderr);
}

double link_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Read n bytes before the monotonic time `deadline`: 0, -1 (end of file, error), -2 (timed out). */
static int read_all(int fd, void *buf, size_t n, double deadline) {
    char *p = buf;
    while (n > 0) {
        ssize_t k = read(fd, p, n);  /* non-blocking socket */
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            double left = deadline - link_now();
            if (left <= 0) return -2;
            struct pollfd pfd = {fd, POLLIN, 0};
            int r = poll(&pfd, 1, left > 1e6 ? 1000000000 : (int)(left * 1e3) + 1);
            if (r < 0 && errno != EINTR) return -1;
            continue;
        }
        if (k <= 0) return -1;
        p += k; n -= (size_t)k;
    }
    return 0;
}

static int reserve(void **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    void *p = realloc(*buf, need);
    if (!p) return -1;
    *buf = p; *cap = need;
    return 0;
}

/* How the worker ended, for a message ("exit status 1", "killed by signal 9", "still running"). */
void link_reap(WorkerLink *w, int block) {
    int st = 0;
    char *how = w->ended;
    size_t n = sizeof w->ended;
    if (w->pid <= 0) return;
    snprintf(how, n, "still running");
    pid_t r;
    do { r = waitpid(w->pid, &st, block ? 0 : WNOHANG); } while (r < 0 && errno == EINTR);
    if (r < 0 && errno == ECHILD) {  /* the host reaps its children itself (SIGCHLD ignored or handled) */
        w->pid = 0;
        snprintf(how, n, "ended; its exit status was collected by the host");
        return;
    }
    if (r != w->pid) return;
    w->pid = 0;
    if (WIFEXITED(st)) snprintf(how, n, "exit status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st)) snprintf(how, n, "killed by signal %d", WTERMSIG(st));
}

static const char *op_name(const WorkerLink *w, uint32_t op) {
    return w->op_names && op >= OP_HELLO && op <= OP_SET_STATE ? w->op_names[op] : "a request";
}

void link_gone(WorkerLink *w, uint32_t op) {
    const char *during = op_name(w, op);
    pid_t pid = w->pid;
    if (w->dead) return;
    w->dead = 1;
    for (int k = 0; k < 50 && w->pid > 0; k++) {  /* give the kernel a moment to report the exit */
        link_reap(w, 0);
        if (w->pid > 0) { struct timespec ts = {0, 2000000}; nanosleep(&ts, NULL); }
    }
    link_alert(w, w->log, 3, "the mbsd-twin worker process (pid %d) is gone (%s) during %s: this instance cannot continue; "
          "free it and instantiate the FMU again", (int)pid, w->pid > 0 ? "no reply" : w->ended, during);
}


/* The worker did not answer in time: kill it (a stopped process dies of SIGKILL too), say so. */
void link_hung(WorkerLink *w, uint32_t op, double waited) {
    pid_t pid = w->pid;
    w->dead = 1;
    if (pid > 0) { kill(pid, SIGKILL); link_reap(w, 1); }
    link_alert(w, w->log, 3, "the mbsd-twin worker process (pid %d) did not answer %s within %.3g s: it was killed; this "
          "instance cannot continue: free it and instantiate the FMU again (the bound is set with the environment "
          "variable MBSD_TWIN_FMU_TIMEOUT or resources/mbsd_twin_timeout.txt, in seconds)", (int)pid,
          op_name(w, op), waited);
}

/* One sendmsg for the whole frame (the worker wakes once); MSG_NOSIGNAL: no SIGPIPE from a dead worker. */
static int send_frame(int fd, struct iovec *iov, int n, double deadline) {
    while (n > 0) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t k = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {  /* a large frame: the worker reads it */
            double left = deadline - link_now();
            if (left <= 0) return -2;
            struct pollfd pfd = {fd, POLLOUT, 0};
            if (poll(&pfd, 1, left > 1e6 ? 1000000000 : (int)(left * 1e3) + 1) < 0 && errno != EINTR) return -1;
            continue;
        }
        if (k < 0) return -1;
        while (n > 0 && (size_t)k >= iov->iov_len) { k -= (ssize_t)iov->iov_len; iov++; n--; }
        if (n > 0) { iov->iov_base = (char *)iov->iov_base + k; iov->iov_len -= (size_t)k; }
    }
    return 0;
}

int link_send(WorkerLink *w, const Request *rq) {
    uint32_t head[6] = {rq->op, rq->flags, rq->n_set, rq->n_vr, rq->n_real, rq->n_bytes};
    if (w->dead) {
        link_logf(w, 3, "%s refused: the instance's worker process is gone; free the instance", op_name(w, rq->op));
        return -1;
    }
    struct iovec iov[6] = {{head, sizeof head}, {(void *)rq->set_vr, 4u * rq->n_set},
                           {(void *)rq->set_val, 8u * rq->n_set}, {(void *)rq->vr, 4u * rq->n_vr},
                           {(void *)rq->real, 8u * rq->n_real}, {(void *)rq->bytes, rq->n_bytes}};
    double wait = w->timeout > 0 ? w->timeout : LINK_DEFAULT_TIMEOUT;
    int r = send_frame(w->sock, iov, 6, link_now() + wait);
    if (r == -2) { link_hung(w, rq->op, wait); return -1; }
    if (r) {
        link_gone(w, rq->op);
        return -1;
    }
    return 0;
}

int link_read_reply(WorkerLink *w, uint32_t op) {
    uint32_t rep[4];
    double wait = op == OP_HELLO ? (w->start_timeout > 0 ? w->start_timeout : LINK_START_TIMEOUT)
                                 : (w->timeout > 0 ? w->timeout : LINK_DEFAULT_TIMEOUT);
    double deadline = link_now() + wait;
    int r = read_all(w->sock, rep, sizeof rep, deadline);
    if (r == -2) { link_hung(w, op, wait); return -1; }
    if (r) {
        link_gone(w, op);
        return -1;
    }
    w->status = (int32_t)rep[0]; w->n_real = rep[1]; w->n_bytes = rep[2];
    char *logs = NULL;
    if (reserve((void **)&w->reals, &w->cap_real, 8u * rep[1] + 8) ||
        reserve((void **)&w->bytes, &w->cap_bytes, (size_t)rep[2] + 1) || !(logs = malloc((size_t)rep[3] + 1))
        || (r = read_all(w->sock, w->reals, 8u * rep[1], deadline)) || (r = read_all(w->sock, w->bytes, rep[2], deadline))
        || (r = read_all(w->sock, logs, rep[3], deadline))) {
        free(logs);
        if (r == -2) link_hung(w, op, wait); else link_gone(w, op);
        return -1;
    }
    for (uint32_t at = 0; at + 8 <= rep[3];) {  /* log records: status, length, text */
        uint32_t rec[2];
        memcpy(rec, logs + at, 8);
        at += 8;
        if (rec[1] > rep[3] - at) break;
        char keep = logs[at + rec[1]];
        logs[at + rec[1]] = '\0';
        if (w->log) w->log(w->log_ctx, (int)rec[0], logs + at);
        logs[at + rec[1]] = keep;
        at += rec[1];
    }
    free(logs);
    return 0;
}
