/* FMI 2.0 co-simulation API of mbsd-twin's host-independent FMU.

   No Python in the host process: each instance starts a worker process (worker_link.c) that runs
   mbsd_twin.fmi.worker, which serves the model with the same slave logic as the PythonFMU FMU.
   The instance logic (held inputs, cached outputs, FMU state) is shim_core.c, shared with the
   FMI 3.0 library; this file maps the FMI 2.0 functions onto it.

   Built by mbsd_twin.fmi.native_build with gcc; MBSD_GUID is the modelDescription's guid. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fmi2Functions.h"
#include "log_fmi2.h"
#include "shim_core.h"

#ifndef MBSD_GUID
#error "compile with -DMBSD_GUID=\"{...}\" (the modelDescription's guid)"
#endif

typedef struct { Inst core; fmi2CallbackFunctions cb; } Inst2;

static const char *const OP_NAMES[] = {"?", "instantiation", "fmi2SetupExperiment", "fmi2ExitInitializationMode",
                                       "fmi2Reset", "fmi2GetReal", "fmi2SetReal", "fmi2DoStep", "fmi2GetFMUstate",
                                       "fmi2SetFMUstate"};


static void emit(Inst *c, int status, const char *text) {
    mbsd_fmi2_log(&((Inst2 *)c)->cb, c->name, status, text);
}

fmi2Component fmi2Instantiate(fmi2String name, fmi2Type type, fmi2String guid, fmi2String resource_uri,
                              const fmi2CallbackFunctions *cb, fmi2Boolean visible, fmi2Boolean logging) {
    (void)visible;
    if (!cb) return NULL;
    Inst2 *s = (Inst2 *)core_new(sizeof(Inst2), name, logging, emit, OP_NAMES);
    if (!s) return NULL;
    s->cb = *cb;
    Inst *c = &s->core;
    char *res = resource_uri ? core_uri_to_path(resource_uri) : NULL;
    int ok = 0;
    if (type != fmi2CoSimulation) core_log(c, fmi2Error, "this FMU supports co-simulation only");
    else if (!guid || strcmp(guid, MBSD_GUID)) core_log(c, fmi2Error, "the GUID does not match this FMU's "
                                                                       "modelDescription (" MBSD_GUID ")");
    else if (!res) core_log(c, fmi2Error, "no fmuResourceLocation given: the worker needs the FMU's resources");
    else ok = !core_start(c, res);
    free(res);
    if (ok) return s;
    core_free(c);
    return NULL;
}

void fmi2FreeInstance(fmi2Component c) { core_free(c); }  /* NULL or freed: nothing */

/* Hooks of fmi2_misc.c (hidden: not exported). A NULL or freed instance is not live: the misc
   functions return fmi2Error without touching it. */
int mbsd_live(fmi2Component c);
void mbsd_log_error(fmi2Component c, const char *text);
void mbsd_set_logging(fmi2Component c, int on);
double mbsd_last_time(fmi2Component c);
int mbsd_live(fmi2Component c) { return core_live(c); }
void mbsd_log_error(fmi2Component c, const char *text) { if (core_live(c)) core_log(c, fmi2Error, text); }
void mbsd_set_logging(fmi2Component c, int on) { if (core_live(c)) ((Inst *)c)->logging = on; }
double mbsd_last_time(fmi2Component c) { return core_live(c) ? ((Inst *)c)->time : 0.0; }

fmi2Status fmi2SetupExperiment(fmi2Component c, fmi2Boolean tol_defined, fmi2Real tol, fmi2Real start,
                               fmi2Boolean stop_defined, fmi2Real stop) {
    (void)tol_defined; (void)tol; (void)stop_defined; (void)stop;  /* as the PythonFMU FMU: set solver.rtol */
    return (fmi2Status)core_simple(c, OP_SETUP, start);
}

fmi2Status fmi2EnterInitializationMode(fmi2Component c) { return (fmi2Status)core_usable(c); }
fmi2Status fmi2ExitInitializationMode(fmi2Component c) { return (fmi2Status)core_simple(c, OP_EXIT_INIT, 0.0); }
fmi2Status fmi2Terminate(fmi2Component c) { return (fmi2Status)core_usable(c); }
fmi2Status fmi2Reset(fmi2Component c) { return (fmi2Status)core_simple(c, OP_RESET, 0.0); }

fmi2Status fmi2GetReal(fmi2Component c, const fmi2ValueReference vr[], size_t n, fmi2Real value[]) {
    return (fmi2Status)core_get(c, vr, n, value);
}

fmi2Status fmi2SetReal(fmi2Component c, const fmi2ValueReference vr[], size_t n, const fmi2Real value[]) {
    return (fmi2Status)core_set(c, vr, n, value);
}

fmi2Status fmi2DoStep(fmi2Component c, fmi2Real t, fmi2Real h, fmi2Boolean no_prior) {
    (void)no_prior;
    return (fmi2Status)core_step(c, t, h);
}

fmi2Status fmi2CancelStep(fmi2Component c) {  /* doStep is synchronous */
    if (core_live(c)) core_log(c, fmi2Error, "fmi2CancelStep: fmi2DoStep is synchronous (nothing to cancel)");
    return fmi2Error;
}

/* --------------------------------------------------------------------------- FMU state */
fmi2Status fmi2GetFMUstate(fmi2Component c, fmi2FMUstate *state) { return (fmi2Status)core_get_state(c, state); }
fmi2Status fmi2SetFMUstate(fmi2Component c, fmi2FMUstate state) { return (fmi2Status)core_set_state(c, state); }

fmi2Status fmi2FreeFMUstate(fmi2Component c, fmi2FMUstate *state) {
    if (!core_live(c)) return fmi2Error;
    core_free_state(state);
    return fmi2OK;
}

fmi2Status fmi2SerializedFMUstateSize(fmi2Component c, fmi2FMUstate state, size_t *size) {
    return (fmi2Status)core_state_size(c, state, size);
}

fmi2Status fmi2SerializeFMUstate(fmi2Component c, fmi2FMUstate state, fmi2Byte out[], size_t size) {
    return (fmi2Status)core_serialize(c, state, (unsigned char *)out, size);
}

fmi2Status fmi2DeSerializeFMUstate(fmi2Component c, const fmi2Byte in[], size_t size, fmi2FMUstate *state) {
    return (fmi2Status)core_deserialize(c, (const unsigned char *)in, size, state);
}
