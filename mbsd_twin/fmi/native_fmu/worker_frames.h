/* The link between the host-independent FMU's shared library and its Python worker process: the
   frames, the shared page's layout and the link's state (worker_frames.c; the calls: worker_link.h).

   One worker per FMU instance: `<python> -m mbsd_twin.fmi.worker <resources dir>`, its stdin and
   stdout one end of a Unix socket pair (written with MSG_NOSIGNAL: a dead worker never raises
   SIGPIPE in the host), its stderr a pipe read by the library until the worker is ready (the text
   of a failed start-up goes into the logged message), then the host's stderr (fd 3 at exec).

   Request frame: six uint32 (op, flags, n_set, n_vr, n_real, n_bytes), then n_set uint32 value
   references and n_set doubles (held input values applied before the op), n_vr uint32 value
   references, n_real doubles, n_bytes bytes.
   Reply frame: four uint32 (status, n_real, n_bytes, n_log), then n_real doubles, n_bytes bytes and
   n_log bytes of log records (uint32 status, uint32 length, text).
   Native byte order: both ends run on the same machine. The Python end: mbsd_twin/fmi/worker.py.

   Every reply is awaited for at most w->timeout seconds (the start-up's for at most
   w->start_timeout): a worker that is alive but silent (stopped, deadlocked) is killed, the call
   fails with the reason logged, and the instance is gone as if the worker had died. */
#ifndef MBSD_WORKER_FRAMES_H
#define MBSD_WORKER_FRAMES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The mbsd-twin version that built the FMU (native_build.py passes -DMBSD_TWIN_VERSION="0.1.0") and
   the wheel a machine without it installs (fmu/README.md, "Ship an FMU to another machine"). */
#ifndef MBSD_TWIN_VERSION
#define MBSD_TWIN_VERSION "*"
#endif
#define MBSD_TWIN_INSTALL "python -m pip install mbsd_twin-" MBSD_TWIN_VERSION "-py3-none-any.whl, the wheel of " \
    "mbsd-twin " MBSD_TWIN_VERSION ": fmu/README.md, section Ship an FMU to another machine"

enum { OP_HELLO = 1, OP_SETUP = 2, OP_EXIT_INIT = 3, OP_RESET = 4, OP_GET_REAL = 5, OP_SET_REAL = 6,
       OP_DO_STEP = 7, OP_GET_STATE = 8, OP_SET_STATE = 9 };
enum { FLAG_WANT_OUTPUTS = 1, FLAG_SHM = 2 /* HELLO: fd 4 of the worker is the shared page */ };

/* The shared page (worker_shm.c): a memfd mapped by both ends, fd 4 of the worker. The DO_STEP
   requests and their replies go through it instead of the socket: the library writes the held
   inputs, t and h and bumps `req`; the worker (spinning for a while, then asleep on the futex
   `req`) steps, writes the status and the outputs and bumps `rep`, on which the library spins for
   a while, then sleeps. A reply that carries log records goes over the socket instead
   (`on_socket`). Every other request goes over the socket, announced by a bump of `req` with
   kind SHM_SOCKET. Offsets are mirrored in mbsd_twin/fmi/worker.py (SHM_*). */
enum { SHM_SIZE = 65536, SHM_MAX = 2048, SHM_VR = 64, SHM_VAL = SHM_VR + 4 * SHM_MAX, SHM_OUT = SHM_VAL + 8 * SHM_MAX };
enum { SHM_STEP = 1, SHM_SOCKET = 2 };
typedef struct {
    uint32_t req, rep;                 /* sequence numbers (futex words) */
    uint32_t worker_waits, host_waits; /* asleep on req / rep: wake it */
    uint32_t kind, flags, n_set;       /* the request: SHM_STEP or SHM_SOCKET, its flags, held inputs */
    uint32_t status, on_socket, n_out; /* the reply */
    uint32_t spin_us, pad;             /* how long the worker spins before sleeping */
    double t, h;
} ShmHead;

typedef void (*link_log_fn)(void *ctx, int status, const char *text);

typedef struct {
    pid_t pid;            /* the worker, 0 once reaped */
    int sock;             /* our end of the socket pair, -1 once closed */
    int dead;             /* the worker is gone: every call fails */
    char ended[64];       /* how it ended: "exit status 1", "killed by signal 9" */
    /* the last reply */
    int32_t status;
    double *reals; uint32_t n_real; size_t cap_real;
    unsigned char *bytes; uint32_t n_bytes; size_t cap_bytes;
    link_log_fn log; void *log_ctx;
    const char *const *op_names;  /* each op's name in the FMI version's terms, for messages */
    ShmHead *shm;          /* the shared page, NULL: every request over the socket */
    int shm_fd;            /* its memfd until the worker has it, -1 */
    double spin_us;        /* how long the library spins on a reply before sleeping */
    unsigned spin_skip;    /* replies still to await without spinning (after a spin in vain) */
    unsigned spin_backoff; /* how many: doubled after each spin in vain, reset by a spin that paid */
    double timeout;        /* s a reply may take (0: the default, LINK_DEFAULT_TIMEOUT) */
    double start_timeout;  /* s the start-up may take (0: LINK_START_TIMEOUT) */
} WorkerLink;

#define LINK_DEFAULT_TIMEOUT 30.0  /* without the step time limit reported by the worker */
#define LINK_START_TIMEOUT 300.0   /* loading the model; the first start may compile the engine */

typedef struct {
    uint32_t op, flags, n_set, n_vr, n_real, n_bytes;
    const uint32_t *set_vr; const double *set_val;
    const uint32_t *vr; const double *real; const void *bytes;
} Request;

/* worker_frames.c: frames over the socket, the time, the end of a worker */
double link_now(void);
int link_send(WorkerLink *w, const Request *rq);
int link_read_reply(WorkerLink *w, uint32_t op);
void link_gone(WorkerLink *w, uint32_t op);
void link_hung(WorkerLink *w, uint32_t op, double waited);
void link_logf(WorkerLink *w, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* As link_logf, and on stderr too (a worker that cannot start or is gone must not go unexplained). */
void link_alert(WorkerLink *w, link_log_fn log, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void link_reap(WorkerLink *w, int block);  /* how the worker ended (w->ended), w->pid 0 once reaped */

#endif
