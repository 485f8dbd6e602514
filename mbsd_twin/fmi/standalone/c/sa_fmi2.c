/* FMI 2.0 co-simulation API of mbsd-twin's standalone FMU: the engine's object code and the model
   data are in this library, nothing runs outside it (no Python, no worker, no file read). The
   instance is sa_core.c; the rest of the API (version queries, non-Real accessors, status queries)
   is native_fmu/fmi2_misc.c, shared with the host-independent FMU.

   Built by mbsd_twin.fmi.standalone with gcc; MBSD_GUID is the modelDescription's guid. */
#include <stdlib.h>
#include <string.h>

#include "fmi2Functions.h"
#include "log_fmi2.h"
#include "sa_core.h"

#ifndef MBSD_GUID
#error "compile with -DMBSD_GUID=\"{...}\" (the modelDescription's guid)"
#endif

/* every function that takes an instance checks it first: NULL or freed is an Error (sa_core.c) */
int mbsd_live(fmi2Component c);
#define LIVE(c) do { if (!mbsd_live(c)) return fmi2Error; } while (0)

typedef struct { SaInst core; fmi2CallbackFunctions cb; } Inst2;


static void emit(SaInst *c, int status, const char *text) {
    mbsd_fmi2_log(&((Inst2 *)c)->cb, c->name, status, text);
}

fmi2Component fmi2Instantiate(fmi2String name, fmi2Type type, fmi2String guid, fmi2String resource_uri,
                              const fmi2CallbackFunctions *cb, fmi2Boolean visible, fmi2Boolean logging) {
    (void)visible; (void)resource_uri;  /* everything is in this library */
    if (!cb) return NULL;
    Inst2 *s = (Inst2 *)sa_new(sizeof(Inst2), name, logging, NULL);
    if (!s) return NULL;
    s->cb = *cb;
    s->core.emit = emit;
    if (type != fmi2CoSimulation) sa_log(&s->core, fmi2Error, "this FMU supports co-simulation only");
    else if (!guid || strcmp(guid, MBSD_GUID)) sa_log(&s->core, fmi2Error, "the GUID does not match this FMU's "
                                                                            "modelDescription (" MBSD_GUID ")");
    else if (!sa_start(&s->core)) return s;
    sa_free(&s->core);
    return NULL;
}

void fmi2FreeInstance(fmi2Component c) { sa_free(c); }

/* for fmi2_misc.c (hidden: not exported) */
void mbsd_log_error(fmi2Component c, const char *text);
void mbsd_set_logging(fmi2Component c, int on);
double mbsd_last_time(fmi2Component c);
void mbsd_log_error(fmi2Component c, const char *text) { sa_log(c, fmi2Error, text); }
void mbsd_set_logging(fmi2Component c, int on) { ((SaInst *)c)->logging = on; }
double mbsd_last_time(fmi2Component c) { return sa_time(c); }

fmi2Status fmi2SetupExperiment(fmi2Component c, fmi2Boolean tol_defined, fmi2Real tol, fmi2Real start,
                               fmi2Boolean stop_defined, fmi2Real stop) {
    LIVE(c);
    (void)tol_defined; (void)tol; (void)stop_defined; (void)stop;  /* as the PythonFMU FMU: set solver.rtol */
    return (fmi2Status)sa_setup(c, start);
}

fmi2Status fmi2EnterInitializationMode(fmi2Component c) {
    LIVE(c);
    return fmi2OK;
}

fmi2Status fmi2ExitInitializationMode(fmi2Component c) {
    LIVE(c);
    return (fmi2Status)sa_exit_init(c);
}

fmi2Status fmi2Terminate(fmi2Component c) {
    LIVE(c);
    return fmi2OK;
}

fmi2Status fmi2Reset(fmi2Component c) {
    LIVE(c);
    return (fmi2Status)sa_reset(c);
}

fmi2Status fmi2GetReal(fmi2Component c, const fmi2ValueReference vr[], size_t n, fmi2Real value[]) {
    LIVE(c);
    return (fmi2Status)sa_get(c, vr, n, value);
}

fmi2Status fmi2SetReal(fmi2Component c, const fmi2ValueReference vr[], size_t n, const fmi2Real value[]) {
    LIVE(c);
    return (fmi2Status)sa_set(c, vr, n, value);
}

fmi2Status fmi2DoStep(fmi2Component c, fmi2Real t, fmi2Real h, fmi2Boolean no_prior) {
    LIVE(c);
    (void)no_prior;
    return (fmi2Status)sa_step(c, t, h);
}

fmi2Status fmi2CancelStep(fmi2Component c) {
    LIVE(c);
    return fmi2Error;  /* doStep is synchronous */
}

fmi2Status fmi2GetFMUstate(fmi2Component c, fmi2FMUstate *state) {
    LIVE(c);
    return (fmi2Status)sa_get_state(c, state);
}

fmi2Status fmi2SetFMUstate(fmi2Component c, fmi2FMUstate state) {
    LIVE(c);
    return (fmi2Status)sa_set_state(c, state);
}

fmi2Status fmi2FreeFMUstate(fmi2Component c, fmi2FMUstate *state) {
    LIVE(c);
    sa_free_state(state);
    return fmi2OK;
}

fmi2Status fmi2SerializedFMUstateSize(fmi2Component c, fmi2FMUstate state, size_t *size) {
    LIVE(c);
    return (fmi2Status)sa_state_size(c, state, size);
}

fmi2Status fmi2SerializeFMUstate(fmi2Component c, fmi2FMUstate state, fmi2Byte out[], size_t size) {
    LIVE(c);
    return (fmi2Status)sa_serialize(c, state, (unsigned char *)out, size);
}

fmi2Status fmi2DeSerializeFMUstate(fmi2Component c, const fmi2Byte in[], size_t size, fmi2FMUstate *state) {
    LIVE(c);
    return (fmi2Status)sa_deserialize(c, (const unsigned char *)in, size, state);
}
