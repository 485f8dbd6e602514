/* The rest of the FMI 2.0 co-simulation API of the host-independent FMU: version queries, debug
   logging, the Integer/Boolean/String accessors (the FMU has Real variables only), the status
   queries (doStep is synchronous), input/output derivatives and directional derivatives (not
   provided). */
#include <string.h>

#include "fmi2Functions.h"

/* from fmi2_shim.c (hidden: not exported); mbsd_live: whether c is a live instance (not NULL, not
   freed): every function here returns fmi2Error for one that is not */
int mbsd_live(fmi2Component c);
void mbsd_log_error(fmi2Component c, const char *text);
void mbsd_set_logging(fmi2Component c, int on);
double mbsd_last_time(fmi2Component c);

const char *fmi2GetTypesPlatform(void) { return fmi2TypesPlatform; }
const char *fmi2GetVersion(void) { return fmi2Version; }

fmi2Status fmi2SetDebugLogging(fmi2Component c, fmi2Boolean on, size_t n, const fmi2String cats[]) {
    (void)n; (void)cats;
    if (!mbsd_live(c)) return fmi2Error;
    mbsd_set_logging(c, on);
    return fmi2OK;
}

static fmi2Status no_such(fmi2Component c, size_t n, const char *what) {
    if (!mbsd_live(c)) return fmi2Error;
    if (n == 0) return fmi2OK;
    char text[160];
    strcpy(text, "this FMU has no ");
    strcat(text, what);
    strcat(text, " variables (every variable is a Real)");
    mbsd_log_error(c, text);
    return fmi2Error;
}

fmi2Status fmi2GetInteger(fmi2Component c, const fmi2ValueReference vr[], size_t n, fmi2Integer v[]) {
    (void)vr; (void)v; return no_such(c, n, "Integer");
}
fmi2Status fmi2GetBoolean(fmi2Component c, const fmi2ValueReference vr[], size_t n, fmi2Boolean v[]) {
    (void)vr; (void)v; return no_such(c, n, "Boolean");
}
fmi2Status fmi2GetString(fmi2Component c, const fmi2ValueReference vr[], size_t n, fmi2String v[]) {
    (void)vr; (void)v; return no_such(c, n, "String");
}
fmi2Status fmi2SetInteger(fmi2Component c, const fmi2ValueReference vr[], size_t n, const fmi2Integer v[]) {
    (void)vr; (void)v; return no_such(c, n, "Integer");
}
fmi2Status fmi2SetBoolean(fmi2Component c, const fmi2ValueReference vr[], size_t n, const fmi2Boolean v[]) {
    (void)vr; (void)v; return no_such(c, n, "Boolean");
}
fmi2Status fmi2SetString(fmi2Component c, const fmi2ValueReference vr[], size_t n, const fmi2String v[]) {
    (void)vr; (void)v; return no_such(c, n, "String");
}

fmi2Status fmi2GetDirectionalDerivative(fmi2Component c, const fmi2ValueReference u[], size_t nu,
                                        const fmi2ValueReference z[], size_t nz, const fmi2Real dv[], fmi2Real dz[]) {
    (void)u; (void)nu; (void)z; (void)nz; (void)dv; (void)dz;
    if (!mbsd_live(c)) return fmi2Error;
    mbsd_log_error(c, "fmi2GetDirectionalDerivative is not provided (providesDirectionalDerivative=false)");
    return fmi2Error;
}

fmi2Status fmi2SetRealInputDerivatives(fmi2Component c, const fmi2ValueReference vr[], size_t n,
                                       const fmi2Integer order[], const fmi2Real v[]) {
    (void)vr; (void)n; (void)order; (void)v;
    if (!mbsd_live(c)) return fmi2Error;
    mbsd_log_error(c, "fmi2SetRealInputDerivatives: the FMU cannot interpolate inputs (canInterpolateInputs=false)");
    return fmi2Error;
}

fmi2Status fmi2GetRealOutputDerivatives(fmi2Component c, const fmi2ValueReference vr[], size_t n,
                                        const fmi2Integer order[], fmi2Real v[]) {
    (void)vr; (void)n; (void)order; (void)v;
    if (!mbsd_live(c)) return fmi2Error;
    mbsd_log_error(c, "fmi2GetRealOutputDerivatives is not provided (maxOutputDerivativeOrder=0)");
    return fmi2Error;
}

/* doStep is synchronous: only the terminated flag and the last successful time have answers. */
fmi2Status fmi2GetStatus(fmi2Component c, const fmi2StatusKind k, fmi2Status *v) {
    (void)k; (void)v; return mbsd_live(c) ? fmi2Discard : fmi2Error;
}
fmi2Status fmi2GetRealStatus(fmi2Component c, const fmi2StatusKind k, fmi2Real *v) {
    if (!mbsd_live(c) || !v) return fmi2Error;
    if (k != fmi2LastSuccessfulTime) return fmi2Discard;
    *v = mbsd_last_time(c);
    return fmi2OK;
}
fmi2Status fmi2GetIntegerStatus(fmi2Component c, const fmi2StatusKind k, fmi2Integer *v) {
    (void)k; (void)v; return mbsd_live(c) ? fmi2Discard : fmi2Error;
}
fmi2Status fmi2GetBooleanStatus(fmi2Component c, const fmi2StatusKind k, fmi2Boolean *v) {
    if (!mbsd_live(c) || !v) return fmi2Error;
    if (k != fmi2Terminated) return fmi2Discard;
    *v = fmi2False;
    return fmi2OK;
}
fmi2Status fmi2GetStringStatus(fmi2Component c, const fmi2StatusKind k, fmi2String *v) {
    (void)k; (void)v; return mbsd_live(c) ? fmi2Discard : fmi2Error;
}
