/* The worker process of the host-independent FMU: its start, calls and stop (see worker_link.h;
   the frames: worker_frames.c, the shared page: worker_shm.c). */
#define _GNU_SOURCE
#include "worker_link.h"
#include "worker_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
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

#define ERR_TAIL 2000  /* bytes of the worker's start-up stderr kept for the message */
/* mbsd_twin.compiled.nb_cache.compile_notice: passed on at once, as a warning (shown without debug logging) */
#define COMPILE_NOTICE "mbsd-twin: compiling"


int link_call(WorkerLink *w, const Request *rq) {
    if (w->shm) return shm_call(w, rq);
    return link_send(w, rq) || link_read_reply(w, rq->op) ? -1 : 0;
}

static void exec_worker(int sock, int err, int shm, const char *python, char *const argv[]) {
    /* In the child between fork and exec: async-signal-safe calls only. fds 0/1: the socket, 2: the
       start-up pipe, 3: the host's stderr (the worker moves to it once ready), 4: the shared page. */
    int a = fcntl(sock, F_DUPFD, 10), b = fcntl(err, F_DUPFD, 10), c = fcntl(2, F_DUPFD, 10);
    int d = shm >= 0 ? fcntl(shm, F_DUPFD, 10) : -1;
    if (a < 0 || b < 0 || c < 0 || dup2(a, 0) < 0 || dup2(a, 1) < 0 || dup2(c, 3) < 0 || dup2(b, 2) < 0) _exit(126);
    if (d >= 0 && dup2(d, 4) < 0) _exit(126);
    close(a); close(b); close(c);
    if (d >= 0) close(d);
    close_range(d >= 0 ? 5 : 4, ~0U, 0);  /* the host's other files stay the host's (a pipe's EOF is not held up) */
    signal(SIGPIPE, SIG_DFL);
    execv(python, argv);
    static const char msg[] = "execv of the Python interpreter failed\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(127);
}

/* The worker says it is compiling the engine's kernels (a first run: half a minute or more): tell
   the host now, while it waits in the instantiation, through the host's logger (a warning). */
static void pass_notice(WorkerLink *w, link_log_fn log, const char *buf, size_t k) {
    const char *at = memmem(buf, k, COMPILE_NOTICE, sizeof COMPILE_NOTICE - 1);
    if (!at) return;
    size_t n = k - (size_t)(at - buf);
    const char *end = memchr(at, '\n', n);
    link_alert(w, log, 1, "%.*s", (int)(end ? (size_t)(end - at) : n), at);
}

static int await_ready(WorkerLink *w, int err, char *tail, size_t *n_tail, link_log_fn log) {
    struct pollfd fds[2] = {{w->sock, POLLIN, 0}, {err, POLLIN, 0}};
    double wait = w->start_timeout > 0 ? w->start_timeout : LINK_START_TIMEOUT, deadline = link_now() + wait;
    for (;;) {
        double left = deadline - link_now();
        if (left <= 0) {  /* the model does not load (a stuck import): the failure message follows */
            kill(w->pid, SIGKILL);
            snprintf(tail + *n_tail, ERR_TAIL + 1 - *n_tail, "%s[no reply within %.3g s]", *n_tail ? " " : "", wait);
            *n_tail += strlen(tail + *n_tail);
            return -1;
        }
        int r = poll(fds, err >= 0 ? 2 : 1, (int)(left * 1e3) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (fds[0].revents) return 0;  /* the reply (or EOF: link_call finds out) */
        if (fds[1].revents) {
            char buf[1024];
            ssize_t k = read(err, buf, sizeof buf);
            if (k <= 0) { err = -1; continue; }
            pass_notice(w, log, buf, (size_t)k);
            if (*n_tail + (size_t)k > ERR_TAIL) {
                size_t drop = *n_tail + (size_t)k - ERR_TAIL;
                if (drop > *n_tail) drop = *n_tail;
                memmove(tail, tail + drop, *n_tail - drop);
                *n_tail -= drop;
            }
            size_t take = (size_t)k > ERR_TAIL - *n_tail ? ERR_TAIL - *n_tail : (size_t)k;
            memcpy(tail + *n_tail, buf + k - take, take);
            *n_tail += take;
        }
    }
}

int link_start(WorkerLink *w, const char *python, const char *origin, const char *resources, const char *name) {
    int sv[2], ep[2];
    char tail[ERR_TAIL + 1];
    size_t n_tail = 0;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv)) { link_logf(w, 3, "socketpair failed: %s", strerror(errno)); return -1; }
    if (pipe2(ep, O_CLOEXEC)) { close(sv[0]); close(sv[1]); link_logf(w, 3, "pipe failed: %s", strerror(errno)); return -1; }
    char *argv[] = {(char *)python, "-m", "mbsd_twin.fmi.worker", (char *)resources, NULL};
    int shm = shm_create(w) ? -1 : w->shm_fd;  /* without it, every request over the socket */
    pid_t pid = fork();
    if (pid == 0) exec_worker(sv[1], ep[1], shm, python, argv);
    if (shm >= 0) { close(shm); w->shm_fd = -1; }
    close(sv[1]); close(ep[1]);
    if (pid < 0) { close(sv[0]); close(ep[0]); link_logf(w, 3, "fork failed: %s", strerror(errno)); return -1; }
    w->pid = pid; w->sock = sv[0]; w->dead = 0;
    fcntl(w->sock, F_SETFL, fcntl(w->sock, F_GETFL) | O_NONBLOCK);  /* reads are bounded in time (poll) */
    Request rq = {.op = OP_HELLO, .flags = shm >= 0 ? FLAG_SHM : 0, .n_bytes = (uint32_t)strlen(name), .bytes = name};
    ShmHead *page = w->shm;
    w->shm = NULL;  /* HELLO over the socket; the page in use once the worker has mapped it */
    link_log_fn log = w->log;
    w->log = NULL;  /* a failed start-up gets one message, below */
    int bad = link_send(w, &rq) || await_ready(w, ep[0], tail, &n_tail, log) || link_read_reply(w, OP_HELLO)
              || w->status != 0;
    w->log = log;
    /* the worker has moved its stderr to the host's (or is gone): drain what it wrote while starting */
    for (ssize_t k; n_tail < ERR_TAIL && (k = read(ep[0], tail + n_tail, ERR_TAIL - n_tail)) > 0;) n_tail += (size_t)k;
    close(ep[0]);
    tail[n_tail] = '\0';
    if (!bad) {
        w->shm = page;
        if (n_tail) link_logf(w, 0, "mbsd-twin worker (pid %d) start-up output: %s", (int)pid, tail);
        return 0;
    }
    close(w->sock); w->sock = -1;
    w->shm = page;
    link_reap(w, 1);
    link_alert(w, w->log, 3, "the mbsd-twin worker could not start (%s %s -m mbsd_twin.fmi.worker; %s): %s -- the FMU needs a "
          "Python 3.11+ with mbsd-twin installed (" MBSD_TWIN_INSTALL "); point the environment variable "
          "MBSD_TWIN_FMU_PYTHON at that interpreter", origin, python, w->ended, n_tail ? tail : "no output");
    return -1;
}

/* The end of a freed instance's link, in a detached thread (off the host's call): tell the worker
   to quit (kind 0 in the shared page, end of file on its stdin), unmap the page, wait for the worker
   to exit, at most REAP_WAIT seconds, then kill it; reap it in either case (no zombie). `arg`: a
   heap copy of the link, freed here. */
#define REAP_WAIT 5.0
static void *reaper(void *arg) {
    WorkerLink *e = arg;
    pid_t pid = e->pid, r;
    if (pid > 0 && !e->dead) shm_quit(e);  /* a worker asleep on the shared page wakes and ends */
    if (e->sock >= 0) close(e->sock);      /* one between requests reads end of file */
    shm_destroy(e);
    free(e);
    double end = link_now() + REAP_WAIT;
    long ns = 200000;
    for (; pid > 0;) {
        do { r = waitpid(pid, NULL, WNOHANG); } while (r < 0 && errno == EINTR);
        if (r != 0) return NULL;  /* reaped, or the host reaps its children itself (ECHILD) */
        if (link_now() > end) break;
        struct timespec ts = {0, ns};
        nanosleep(&ts, NULL);
        if (ns < 20000000) ns *= 2;
    }
    if (pid > 0) kill(pid, SIGKILL);
    do { r = pid > 0 ? waitpid(pid, NULL, 0) : 0; } while (r < 0 && errno == EINTR);
    return NULL;
}

void link_stop(WorkerLink *w) {
    WorkerLink *e = malloc(sizeof *e);
    if (e) {
        *e = *w;
        e->reals = NULL; e->bytes = NULL;
        pthread_t th;
        pthread_attr_t attr;
        sigset_t all, old;
        sigfillset(&all);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 65536);
        pthread_sigmask(SIG_SETMASK, &all, &old);  /* the host's signals are not the reaper's */
        int failed = pthread_create(&th, &attr, reaper, e);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        pthread_attr_destroy(&attr);
        if (failed) reaper(e);  /* no thread: the same, here */
    } else {
        if (w->sock >= 0) close(w->sock);
        shm_destroy(w);
        if (w->pid > 0) { kill(w->pid, SIGKILL); link_reap(w, 1); }
    }
    w->sock = -1; w->shm = NULL; w->shm_fd = -1; w->pid = 0;
    free(w->reals); free(w->bytes);
    w->reals = NULL; w->bytes = NULL; w->cap_real = w->cap_bytes = 0;
}
