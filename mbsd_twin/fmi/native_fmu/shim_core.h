/* What the FMI 2.0 and FMI 3.0 libraries of the host-independent FMU share (shim_core.c).

   An instance holds its worker link (worker_link.h), the value references of the inputs and
   outputs (from the worker's HELLO reply), the inputs set by the host and not yet sent, and the
   outputs returned by the last step. Per communication step the host's calls cost one round trip:
   inputs set are held here and sent with the next request; a step returns the outputs at the new
   time when the host read outputs after the previous step, and output reads are then served from
   them until an input changes. The values of the inputs and parameters are known here (the worker
   sends them at the start, after a reset and after a state is restored; the library keeps what
   the host sets): reading them costs no round trip.

   Every entry point checks its instance against the registry of live instances (core_live): a NULL
   or freed instance is an Error, not a crash. fmi2FreeInstance / fmi3FreeInstance return at once:
   the worker is told to quit and reaped by a detached thread (worker_link.c).

   The statuses are FMI's (0 OK, 1 Warning, 2 Discard, 3 Error, 4 Fatal: the same in 2.0 and 3.0);
   the FMI version's file maps its types onto these functions and logs through its host's logger
   (the `emit` function). */
#ifndef MBSD_SHIM_CORE_H
#define MBSD_SHIM_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "shim_python.h"
#include "worker_link.h"

enum { ST_OK = 0, ST_WARNING = 1, ST_DISCARD = 2, ST_ERROR = 3, ST_FATAL = 4 };
#define TIMEOUT_ENV "MBSD_TWIN_FMU_TIMEOUT"
#define TIMEOUT_FILE "mbsd_twin_timeout.txt"
#define TIMEOUT_MARGIN 20.0  /* s added to the FMU's step time limit for the default reply bound */

typedef struct Inst Inst;
typedef void (*emit_fn)(Inst *s, int status, const char *text);

struct Inst {
    WorkerLink link;
    emit_fn emit;  /* the FMI version's logging into its host */
    char *name;
    int logging;
    uint32_t n_in, n_out, n_par, max_vr;
    uint32_t *in_vr, *out_vr, *par_vr;
    int32_t *val_slot, *out_slot;  /* by value reference: position in vals (inputs first, then parameters) / outs, -1 */
    double *vals; char *known;     /* the inputs' and parameters' values, whether known here */
    char *pending; uint32_t *set_vr; double *set_val;  /* inputs set, not yet sent (their values in vals) */
    double *outs;
    int outs_valid, outs_read;
    double time;  /* after the last successful step (or the start time) */
};

/* The FMU state handed to the host: the worker's bytes behind a magic tag. */
typedef struct { char magic[8]; size_t size; unsigned char data[]; } Blob;

/* Whether c is an instance made by core_new and not yet freed (NULL: no). */
int core_live(const void *c);
/* ST_OK for a live instance whose worker is there, else ST_ERROR. */
int core_usable(const void *c);
/* Log an Error and write it to stderr too (hosts that hide the FMI log below debug level). */
void core_alert(Inst *s, const char *text);

/* file:///a/b, file:/a/b or a plain path -> /a/b (percent escapes decoded, trailing '/' dropped) */
char *core_uri_to_path(const char *uri);
/* An instance of `size` bytes (a version's struct that starts with Inst), or NULL. */
Inst *core_new(size_t size, const char *name, int logging, emit_fn emit, const char *const *op_names);
/* Start the worker on the resources folder `res` and take its layout: 0, or -1 with the reason logged. */
int core_start(Inst *s, const char *res);
void core_free(Inst *s);
void core_log(Inst *s, int status, const char *text);

int core_simple(Inst *s, uint32_t op, double value);  /* OP_SETUP (value: start time), OP_EXIT_INIT, OP_RESET */
int core_get(Inst *s, const uint32_t vr[], size_t n, double value[]);
int core_set(Inst *s, const uint32_t vr[], size_t n, const double value[]);
int core_step(Inst *s, double t, double h);

int core_get_state(Inst *s, void **state);
int core_set_state(Inst *s, void *state);
void core_free_state(void **state);
int core_state_size(Inst *s, void *state, size_t *size);
int core_serialize(Inst *s, void *state, unsigned char out[], size_t size);
int core_deserialize(Inst *s, const unsigned char in[], size_t size, void **state);

#endif
