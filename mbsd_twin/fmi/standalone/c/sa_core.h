/* One instance of the standalone FMU (sa_core.c), shared by its FMI 2.0 and FMI 3.0 layers.

   The instance is the compiled stepper of the Simulator (mbsd_twin.compiled.fastpath.CompiledStepper)
   in C: the integrator state S, the inputs u it is bound to, the packed model (ib, fb), the scratch
   wb, the options ob and the context buffer cb, over the engine's object code (sa_engine.h). The
   host's inputs are held and handed to the stepper (a restart when one changed) at the next step
   or output read, as the Python slave does. Statuses are FMI's (0 OK … 4 Fatal). */
#ifndef MBSD_SA_CORE_H
#define MBSD_SA_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "sa_engine.h"

enum { ST_OK = 0, ST_WARNING = 1, ST_DISCARD = 2, ST_ERROR = 3, ST_FATAL = 4 };

typedef struct SaInst SaInst;
typedef void (*sa_emit_fn)(SaInst *s, int status, const char *text);

#define SA_TAG 0x6d6273642d747769ULL  /* "mbsd-twi": a live instance (mbsd_live, sa_core.c) */

struct SaInst {
    uint64_t tag;        /* SA_TAG while live, 0 once freed */
    const SaInst *self;  /* this instance while live */
    sa_emit_fn emit;
    char *name;
    int logging;
    const SaModel *m;
    double *S, *u, *fb, *wb, *ob, *held, *par, *vec;
    i64 *ib, *cb, *ri, *er, ncb;
    uint32_t max_vr;
    int32_t *vr_kind, *vr_index;  /* by value reference: 1 input, 2 output, 3 parameter (0 none); position */
    int vec_valid, changed, changed_before, initialized;
    double start_time;
    double e0;  /* energy baseline [J] of energy.balance_error: the build's, or the changed model's */
};

/* An instance of `size` bytes (a version's struct that starts with SaInst), or NULL; no engine call yet. */
SaInst *sa_new(size_t size, const char *name, int logging, sa_emit_fn emit);
/* The CPU check and the engine's context: 0, or -1 with the reason logged. */
int sa_start(SaInst *s);
void sa_free(SaInst *s);
void sa_log(SaInst *s, int status, const char *text);
int sa_setup(SaInst *s, double start_time);
int sa_exit_init(SaInst *s);
int sa_reset(SaInst *s);
int sa_get(SaInst *s, const uint32_t vr[], size_t n, double value[]);
int sa_set(SaInst *s, const uint32_t vr[], size_t n, const double value[]);
int sa_step(SaInst *s, double t, double h);
double sa_time(SaInst *s);
/* sa_core.c, for sa_io.c: the held inputs to the stepper (-1: one is not finite); the output vector */
int sa_push_inputs(SaInst *s);
int sa_outputs(SaInst *s);
/* sa_io.c, sa_init.c: the options from a tunable parameter; a parameter k's value into its places in fb */
void sa_apply_tunable(SaInst *s, int kind, double v);
void sa_write_fb(SaInst *s, uint32_t k);
/* Run the packed model m (MBSD_MODEL or *MBSD_MODEL_FULL): its ib, fb and wb, the context bound again;
   0, or -1 (out of memory, logged). Nothing when m runs already. */
int sa_use_model(SaInst *s, const SaModel *m);
/* The output vector at the state with the inputs u as they are (no held input pushed): 0 or -1 */
int sa_evaluate(SaInst *s);

int sa_get_state(SaInst *s, void **state);
int sa_set_state(SaInst *s, void *state);
void sa_free_state(void **state);
int sa_state_size(SaInst *s, void *state, size_t *size);
int sa_serialize(SaInst *s, void *state, unsigned char out[], size_t size);
int sa_deserialize(SaInst *s, const unsigned char in[], size_t size, void **state);

#endif
