/* A generic FMI 2.0 co-simulation slave for a small model with Real variables only (model.h):
   instantiation with the guid check, start values, fixed parameters settable until
   fmi2ExitInitializationMode, inputs at any time, fmi2DoStep calling the model, fmi2Reset. No FMU
   state (canGetAndSetFMUstate="false") and no asynchronous steps: those calls return fmi2Error.

   Compiled by examples/cosim/cosim_build.py with the generated model_vars.h, the FMI 2.0 headers
   of mbsd_twin/fmi/native_fmu and its fmi2_misc.c (the remaining, model-independent functions).
   Messages to the logger contain no '%' (they are passed as the format). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmi2Functions.h"
#include "model.h"

typedef struct {
    Model m;
    fmi2CallbackFunctions cb;
    char name[64];
    int logging, initialized;
    double time;
} Inst;

static const double START[MODEL_N_VARS] = MODEL_START;
static const char CAUSALITY[] = MODEL_CAUSALITY;

static fmi2Status say(Inst *s, fmi2Status status, const char *text) {
    if (s->cb.logger && (status != fmi2OK || s->logging))
        s->cb.logger(s->cb.componentEnvironment, s->name, status, status == fmi2OK ? "logAll" : "logStatusError",
                     text);
    return status;
}

fmi2Component fmi2Instantiate(fmi2String name, fmi2Type type, fmi2String guid, fmi2String resources,
                              const fmi2CallbackFunctions *cb, fmi2Boolean visible, fmi2Boolean logging) {
    (void)resources; (void)visible;
    if (!cb || type != fmi2CoSimulation || !guid || strcmp(guid, MODEL_GUID) != 0) {
        if (cb && cb->logger)
            cb->logger(cb->componentEnvironment, name, fmi2Error, "logStatusError",
                       "fmi2Instantiate: a co-simulation instance with this FMU's guid is expected");
        return NULL;
    }
    Inst *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cb = *cb;
    snprintf(s->name, sizeof s->name, "%s", name ? name : "");
    s->logging = logging;
    memcpy(s->m.v, START, sizeof START);
    return s;
}

void fmi2FreeInstance(fmi2Component c) { free(c); }

fmi2Status fmi2SetupExperiment(fmi2Component c, fmi2Boolean tol_defined, fmi2Real tol, fmi2Real start,
                               fmi2Boolean stop_defined, fmi2Real stop) {
    (void)tol_defined; (void)tol; (void)stop_defined; (void)stop;
    ((Inst *)c)->time = start;
    return fmi2OK;
}

fmi2Status fmi2EnterInitializationMode(fmi2Component c) { (void)c; return fmi2OK; }

fmi2Status fmi2ExitInitializationMode(fmi2Component c) {
    Inst *s = c;
    const char *bad = model_check(&s->m);
    if (bad) return say(s, fmi2Error, bad);
    model_init(&s->m, s->time);
    s->initialized = 1;
    return fmi2OK;
}

fmi2Status fmi2Terminate(fmi2Component c) { (void)c; return fmi2OK; }

fmi2Status fmi2Reset(fmi2Component c) {
    Inst *s = c;
    memset(&s->m, 0, sizeof s->m);
    memcpy(s->m.v, START, sizeof START);
    s->initialized = 0;
    s->time = 0.0;
    return fmi2OK;
}

fmi2Status fmi2GetReal(fmi2Component c, const fmi2ValueReference vr[], size_t n, fmi2Real v[]) {
    Inst *s = c;
    for (size_t k = 0; k < n; k++) {
        if (vr[k] >= MODEL_N_VARS) return say(s, fmi2Error, "fmi2GetReal: unknown value reference");
        v[k] = s->m.v[vr[k]];
    }
    return fmi2OK;
}

fmi2Status fmi2SetReal(fmi2Component c, const fmi2ValueReference vr[], size_t n, const fmi2Real v[]) {
    Inst *s = c;
    for (size_t k = 0; k < n; k++) {
        if (vr[k] >= MODEL_N_VARS || CAUSALITY[vr[k]] == 'o')
            return say(s, fmi2Error, "fmi2SetReal: not an input or parameter");
        if (CAUSALITY[vr[k]] == 'p' && s->initialized)
            return say(s, fmi2Error, "fmi2SetReal: a fixed parameter cannot change after initialisation");
        if (!isfinite(v[k])) return say(s, fmi2Error, "fmi2SetReal: the value is not finite");
    }
    for (size_t k = 0; k < n; k++) s->m.v[vr[k]] = v[k];
    return fmi2OK;
}

fmi2Status fmi2DoStep(fmi2Component c, fmi2Real t, fmi2Real h, fmi2Boolean new_step) {
    Inst *s = c;
    (void)new_step;
    if (!s->initialized) return say(s, fmi2Error, "fmi2DoStep before fmi2ExitInitializationMode");
    if (!(h > 0.0) || !isfinite(t) || !isfinite(h)) return say(s, fmi2Error, "fmi2DoStep: bad time or step");
    model_step(&s->m, t, h);
    s->time = t + h;
    return fmi2OK;
}

/* Hooks of mbsd_twin/fmi/native_fmu/fmi2_misc.c, which provides the rest of the API for an FMU of
   Real variables (version queries, debug logging, Integer/Boolean/String access, derivatives,
   status queries); the build compiles it into this library. mbsd_live: whether c is an instance
   (these example FMUs check for NULL only). */
int mbsd_live(fmi2Component c);
int mbsd_live(fmi2Component c) { return c != NULL; }
void mbsd_log_error(fmi2Component c, const char *text);
void mbsd_set_logging(fmi2Component c, int on);
double mbsd_last_time(fmi2Component c);
void mbsd_log_error(fmi2Component c, const char *text) { say(c, fmi2Error, text); }
void mbsd_set_logging(fmi2Component c, int on) { ((Inst *)c)->logging = on; }
double mbsd_last_time(fmi2Component c) { return ((Inst *)c)->time; }

static fmi2Status no_state(fmi2Component c) {
    return say(c, fmi2Error, "this FMU has no FMU state (canGetAndSetFMUstate=false)");
}
fmi2Status fmi2GetFMUstate(fmi2Component c, fmi2FMUstate *state) { (void)state; return no_state(c); }
fmi2Status fmi2SetFMUstate(fmi2Component c, fmi2FMUstate state) { (void)state; return no_state(c); }
fmi2Status fmi2FreeFMUstate(fmi2Component c, fmi2FMUstate *state) { (void)state; return no_state(c); }
fmi2Status fmi2SerializedFMUstateSize(fmi2Component c, fmi2FMUstate state, size_t *size) {
    (void)state; (void)size; return no_state(c);
}
fmi2Status fmi2SerializeFMUstate(fmi2Component c, fmi2FMUstate state, fmi2Byte bytes[], size_t size) {
    (void)state; (void)bytes; (void)size; return no_state(c);
}
fmi2Status fmi2DeSerializeFMUstate(fmi2Component c, const fmi2Byte bytes[], size_t size, fmi2FMUstate *state) {
    (void)state; (void)bytes; (void)size; return no_state(c);
}
fmi2Status fmi2CancelStep(fmi2Component c) { return say(c, fmi2Error, "fmi2DoStep is synchronous"); }
