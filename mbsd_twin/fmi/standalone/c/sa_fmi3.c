/* FMI 3.0 co-simulation API of mbsd-twin's standalone FMU: the FMI 3.0 counterpart of sa_fmi2.c
   over the same instance (sa_core.c). Every variable is a scalar Float64 (`time` is the
   independent variable); the other types, model exchange, scheduled execution, event mode, clocks
   and derivatives are native_fmu/fmi3_misc.c's and return fmi3Error with a message.

   Built by mbsd_twin.fmi.standalone with gcc; MBSD_GUID is the modelDescription's
   instantiationToken. */
#include <stdlib.h>
#include <string.h>

#include "fmi3Functions.h"
#include "log_fmi3.h"
#include "sa_core.h"

#ifndef MBSD_GUID
#error "compile with -DMBSD_GUID=\"{...}\" (the modelDescription's instantiationToken)"
#endif

/* every function that takes an instance checks it first: NULL or freed is an Error (sa_core.c) */
int mbsd_live(fmi3Instance c);
#define LIVE(c) do { if (!mbsd_live(c)) return fmi3Error; } while (0)

typedef struct { SaInst core; fmi3InstanceEnvironment env; fmi3LogMessageCallback logger; } Inst3;


static void emit(SaInst *c, int status, const char *text) {
    Inst3 *s = (Inst3 *)c;
    mbsd_fmi3_log(s->logger, s->env, status, text);
}

const char *fmi3GetVersion(void) { return fmi3Version; }

fmi3Status fmi3SetDebugLogging(fmi3Instance c, fmi3Boolean on, size_t n, const fmi3String cats[]) {
    LIVE(c);
    (void)n; (void)cats;
    ((SaInst *)c)->logging = on;
    return fmi3OK;
}

fmi3Instance fmi3InstantiateCoSimulation(fmi3String name, fmi3String token, fmi3String resource_path,
                                         fmi3Boolean visible, fmi3Boolean logging, fmi3Boolean event_mode_used,
                                         fmi3Boolean early_return_allowed, const fmi3ValueReference required[],
                                         size_t n_required, fmi3InstanceEnvironment env,
                                         fmi3LogMessageCallback logger, fmi3IntermediateUpdateCallback update) {
    (void)resource_path; (void)visible; (void)early_return_allowed; (void)required; (void)n_required;
    (void)update;  /* everything is in this library */
    Inst3 *s = (Inst3 *)sa_new(sizeof(Inst3), name, logging, NULL);
    if (!s) return NULL;
    s->env = env;
    s->logger = logger;
    s->core.emit = emit;
    if (event_mode_used) sa_log(&s->core, fmi3Error, "this FMU has no event mode (hasEventMode=false): instantiate "
                                                      "it with eventModeUsed=false");
    else if (!token || strcmp(token, MBSD_GUID)) sa_log(&s->core, fmi3Error, "the instantiationToken does not match "
                                                                              "this FMU's modelDescription ("
                                                                              MBSD_GUID ")");
    else if (!sa_start(&s->core)) return s;
    sa_free(&s->core);
    return NULL;
}

void fmi3FreeInstance(fmi3Instance c) { sa_free(c); }

void mbsd_log_error(fmi3Instance c, const char *text);
void mbsd_log_error(fmi3Instance c, const char *text) { sa_log(c, fmi3Error, text); }

fmi3Status fmi3EnterInitializationMode(fmi3Instance c, fmi3Boolean tol_defined, fmi3Float64 tol, fmi3Float64 start,
                                       fmi3Boolean stop_defined, fmi3Float64 stop) {
    LIVE(c);
    (void)tol_defined; (void)tol; (void)stop_defined; (void)stop;  /* as the pythonfmu3 FMU: set solver.rtol */
    return (fmi3Status)sa_setup(c, start);
}

fmi3Status fmi3ExitInitializationMode(fmi3Instance c) {
    LIVE(c);
    return (fmi3Status)sa_exit_init(c);
}

fmi3Status fmi3Terminate(fmi3Instance c) {
    LIVE(c);
    return fmi3OK;
}

fmi3Status fmi3Reset(fmi3Instance c) {
    LIVE(c);
    return (fmi3Status)sa_reset(c);
}

fmi3Status fmi3EnterStepMode(fmi3Instance c) {
    LIVE(c);
    return fmi3OK;
}

static int scalars(fmi3Instance c, size_t n_vr, size_t n_values) {
    if (n_vr == n_values) return 1;
    sa_log(c, fmi3Error, "every variable of this FMU is a scalar: nValues must equal nValueReferences");
    return 0;
}

fmi3Status fmi3GetFloat64(fmi3Instance c, const fmi3ValueReference vr[], size_t n, fmi3Float64 v[], size_t nv) {
    LIVE(c);
    return scalars(c, n, nv) ? (fmi3Status)sa_get(c, vr, n, v) : fmi3Error;
}

fmi3Status fmi3SetFloat64(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const fmi3Float64 v[],
                          size_t nv) {
    LIVE(c);
    return scalars(c, n, nv) ? (fmi3Status)sa_set(c, vr, n, v) : fmi3Error;
}

fmi3Status fmi3DoStep(fmi3Instance c, fmi3Float64 t, fmi3Float64 h, fmi3Boolean no_prior, fmi3Boolean *event_needed,
                      fmi3Boolean *terminate, fmi3Boolean *early_return, fmi3Float64 *last_time) {
    LIVE(c);
    (void)no_prior;
    int st = sa_step(c, t, h);
    if (event_needed) *event_needed = fmi3False;
    if (terminate) *terminate = fmi3False;
    if (early_return) *early_return = fmi3False;
    if (last_time) *last_time = sa_time(c);
    return (fmi3Status)st;
}

fmi3Status fmi3GetFMUState(fmi3Instance c, fmi3FMUState *state) {
    LIVE(c);
    return (fmi3Status)sa_get_state(c, state);
}

fmi3Status fmi3SetFMUState(fmi3Instance c, fmi3FMUState state) {
    LIVE(c);
    return (fmi3Status)sa_set_state(c, state);
}

fmi3Status fmi3FreeFMUState(fmi3Instance c, fmi3FMUState *state) {
    LIVE(c);
    sa_free_state(state);
    return fmi3OK;
}

fmi3Status fmi3SerializedFMUStateSize(fmi3Instance c, fmi3FMUState state, size_t *size) {
    LIVE(c);
    return (fmi3Status)sa_state_size(c, state, size);
}

fmi3Status fmi3SerializeFMUState(fmi3Instance c, fmi3FMUState state, fmi3Byte out[], size_t size) {
    LIVE(c);
    return (fmi3Status)sa_serialize(c, state, (unsigned char *)out, size);
}

fmi3Status fmi3DeserializeFMUState(fmi3Instance c, const fmi3Byte in[], size_t size, fmi3FMUState *state) {
    LIVE(c);
    return (fmi3Status)sa_deserialize(c, (const unsigned char *)in, size, state);
}
