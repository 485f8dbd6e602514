/* FMI 3.0 co-simulation API of mbsd-twin's host-independent FMU.

   The FMI 3.0 counterpart of fmi2_shim.c: the same instance logic (shim_core.c), worker link
   (worker_link.c) and worker (mbsd_twin.fmi.worker, which serves the FMI 3.0 variables: `time` at
   value reference 0, then the table, as the pythonfmu3 FMU). Every variable is a scalar Float64;
   the other types, model exchange, scheduled execution, event mode, clocks and derivatives are in
   fmi3_misc.c and return fmi3Error with a message.

   Built by mbsd_twin.fmi.native_build with gcc; MBSD_GUID is the modelDescription's
   instantiationToken. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fmi3Functions.h"
#include "log_fmi3.h"
#include "shim_core.h"

#ifndef MBSD_GUID
#error "compile with -DMBSD_GUID=\"{...}\" (the modelDescription's instantiationToken)"
#endif

typedef struct { Inst core; fmi3InstanceEnvironment env; fmi3LogMessageCallback logger; } Inst3;

static const char *const OP_NAMES[] = {"?", "instantiation", "fmi3EnterInitializationMode",
                                       "fmi3ExitInitializationMode", "fmi3Reset", "fmi3GetFloat64",
                                       "fmi3SetFloat64", "fmi3DoStep", "fmi3GetFMUState", "fmi3SetFMUState"};


static void emit(Inst *c, int status, const char *text) {
    Inst3 *s = (Inst3 *)c;
    mbsd_fmi3_log(s->logger, s->env, status, text);
}

const char *fmi3GetVersion(void) { return fmi3Version; }

fmi3Status fmi3SetDebugLogging(fmi3Instance c, fmi3Boolean on, size_t n, const fmi3String cats[]) {
    (void)n; (void)cats;
    if (!core_live(c)) return fmi3Error;
    ((Inst *)c)->logging = on;
    return fmi3OK;
}

fmi3Instance fmi3InstantiateCoSimulation(fmi3String name, fmi3String token, fmi3String resource_path,
                                         fmi3Boolean visible, fmi3Boolean logging, fmi3Boolean event_mode_used,
                                         fmi3Boolean early_return_allowed, const fmi3ValueReference required[],
                                         size_t n_required, fmi3InstanceEnvironment env,
                                         fmi3LogMessageCallback logger, fmi3IntermediateUpdateCallback update) {
    (void)visible; (void)early_return_allowed; (void)required; (void)n_required; (void)update;
    Inst3 *s = (Inst3 *)core_new(sizeof(Inst3), name, logging, emit, OP_NAMES);
    if (!s) return NULL;
    s->env = env; s->logger = logger;
    Inst *c = &s->core;
    char *res = resource_path ? core_uri_to_path(resource_path) : NULL;  /* a path in FMI 3.0; a URI tolerated */
    int ok = 0;
    if (event_mode_used) core_log(c, fmi3Error, "this FMU has no event mode (hasEventMode=false): instantiate "
                                               "it with eventModeUsed=false");
    else if (!token || strcmp(token, MBSD_GUID)) core_log(c, fmi3Error, "the instantiationToken does not match "
                                                                         "this FMU's modelDescription (" MBSD_GUID ")");
    else if (!res) core_log(c, fmi3Error, "no resourcePath given: the worker needs the FMU's resources");
    else ok = !core_start(c, res);
    free(res);
    if (ok) return s;
    core_free(c);
    return NULL;
}

void fmi3FreeInstance(fmi3Instance c) { core_free(c); }  /* NULL or freed: nothing */

/* Hooks of fmi3_misc.c (hidden: not exported): a NULL or freed instance is not live. */
int mbsd_live(fmi3Instance c);
void mbsd_log_error(fmi3Instance c, const char *text);
int mbsd_live(fmi3Instance c) { return core_live(c); }
void mbsd_log_error(fmi3Instance c, const char *text) { if (core_live(c)) core_log(c, fmi3Error, text); }

fmi3Status fmi3EnterInitializationMode(fmi3Instance c, fmi3Boolean tol_defined, fmi3Float64 tol, fmi3Float64 start,
                                       fmi3Boolean stop_defined, fmi3Float64 stop) {
    (void)tol_defined; (void)tol; (void)stop_defined; (void)stop;  /* as the pythonfmu3 FMU: set solver.rtol */
    return (fmi3Status)core_simple(c, OP_SETUP, start);
}

fmi3Status fmi3ExitInitializationMode(fmi3Instance c) { return (fmi3Status)core_simple(c, OP_EXIT_INIT, 0.0); }
fmi3Status fmi3Terminate(fmi3Instance c) { return (fmi3Status)core_usable(c); }
fmi3Status fmi3Reset(fmi3Instance c) { return (fmi3Status)core_simple(c, OP_RESET, 0.0); }
fmi3Status fmi3EnterStepMode(fmi3Instance c) { return (fmi3Status)core_usable(c); }

static int scalars(fmi3Instance c, size_t n_vr, size_t n_values) {
    if (!core_live(c)) return 0;
    if (n_vr == n_values) return 1;
    core_log(c, fmi3Error, "every variable of this FMU is a scalar: nValues must equal nValueReferences");
    return 0;
}

fmi3Status fmi3GetFloat64(fmi3Instance c, const fmi3ValueReference vr[], size_t n, fmi3Float64 v[], size_t nv) {
    return scalars(c, n, nv) ? (fmi3Status)core_get(c, vr, n, v) : fmi3Error;
}

fmi3Status fmi3SetFloat64(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const fmi3Float64 v[],
                          size_t nv) {
    return scalars(c, n, nv) ? (fmi3Status)core_set(c, vr, n, v) : fmi3Error;
}

fmi3Status fmi3DoStep(fmi3Instance c, fmi3Float64 t, fmi3Float64 h, fmi3Boolean no_prior, fmi3Boolean *event_needed,
                      fmi3Boolean *terminate, fmi3Boolean *early_return, fmi3Float64 *last_time) {
    (void)no_prior;
    if (!core_live(c)) return fmi3Error;
    int st = core_step(c, t, h);
    if (event_needed) *event_needed = fmi3False;
    if (terminate) *terminate = fmi3False;
    if (early_return) *early_return = fmi3False;
    if (last_time) *last_time = ((Inst *)c)->time;
    return (fmi3Status)st;
}

/* --------------------------------------------------------------------------- FMU state */
fmi3Status fmi3GetFMUState(fmi3Instance c, fmi3FMUState *state) { return (fmi3Status)core_get_state(c, state); }
fmi3Status fmi3SetFMUState(fmi3Instance c, fmi3FMUState state) { return (fmi3Status)core_set_state(c, state); }

fmi3Status fmi3FreeFMUState(fmi3Instance c, fmi3FMUState *state) {
    if (!core_live(c)) return fmi3Error;
    core_free_state(state);
    return fmi3OK;
}

fmi3Status fmi3SerializedFMUStateSize(fmi3Instance c, fmi3FMUState state, size_t *size) {
    return (fmi3Status)core_state_size(c, state, size);
}

fmi3Status fmi3SerializeFMUState(fmi3Instance c, fmi3FMUState state, fmi3Byte out[], size_t size) {
    return (fmi3Status)core_serialize(c, state, (unsigned char *)out, size);
}

fmi3Status fmi3DeserializeFMUState(fmi3Instance c, const fmi3Byte in[], size_t size, fmi3FMUState *state) {
    return (fmi3Status)core_deserialize(c, (const unsigned char *)in, size, state);
}
