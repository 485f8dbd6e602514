/* The rest of the FMI 3.0 API of the host-independent FMU: what a co-simulation FMU with scalar
   Float64 variables only, no event mode, no clocks and no derivatives does not provide. Each
   function logs why and returns fmi3Error (a get or set of no variables is fmi3OK). */
#include <stdio.h>

#include "fmi3Functions.h"

/* fmi3_shim.c (hidden: not exported); mbsd_live: whether c is a live instance (not NULL, not freed):
   every function here returns fmi3Error for one that is not */
int mbsd_live(fmi3Instance c);
void mbsd_log_error(fmi3Instance c, const char *text);

static fmi3Status refuse(fmi3Instance c, const char *fn, const char *why) {
    char text[256];
    if (!mbsd_live(c)) return fmi3Error;
    snprintf(text, sizeof text, "%s is not provided: %s", fn, why);
    mbsd_log_error(c, text);
    return fmi3Error;
}

#define NO_TYPE(fn, n) return (n) == 0 && mbsd_live(c) ? fmi3OK : refuse(c, fn, "every variable of this FMU is a Float64")
#define GET_SET(T, CT)                                                                                    \
    fmi3Status fmi3Get##T(fmi3Instance c, const fmi3ValueReference vr[], size_t n, CT v[], size_t nv) {   \
        (void)vr; (void)v; (void)nv; NO_TYPE("fmi3Get" #T, n);                                            \
    }                                                                                                     \
    fmi3Status fmi3Set##T(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const CT v[], size_t nv) { \
        (void)vr; (void)v; (void)nv; NO_TYPE("fmi3Set" #T, n);                                            \
    }
GET_SET(Float32, fmi3Float32)
GET_SET(Int8, fmi3Int8)
GET_SET(UInt8, fmi3UInt8)
GET_SET(Int16, fmi3Int16)
GET_SET(UInt16, fmi3UInt16)
GET_SET(Int32, fmi3Int32)
GET_SET(UInt32, fmi3UInt32)
GET_SET(Int64, fmi3Int64)
GET_SET(UInt64, fmi3UInt64)
GET_SET(Boolean, fmi3Boolean)
GET_SET(String, fmi3String)

fmi3Status fmi3GetBinary(fmi3Instance c, const fmi3ValueReference vr[], size_t n, size_t sizes[], fmi3Binary v[],
                         size_t nv) {
    (void)vr; (void)sizes; (void)v; (void)nv; NO_TYPE("fmi3GetBinary", n);
}
fmi3Status fmi3SetBinary(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const size_t sizes[],
                         const fmi3Binary v[], size_t nv) {
    (void)vr; (void)sizes; (void)v; (void)nv; NO_TYPE("fmi3SetBinary", n);
}

#define CLOCKS "this FMU has no clocks"
fmi3Status fmi3GetClock(fmi3Instance c, const fmi3ValueReference vr[], size_t n, fmi3Clock v[]) {
    (void)vr; (void)v; NO_TYPE("fmi3GetClock", n);
}
fmi3Status fmi3SetClock(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const fmi3Clock v[]) {
    (void)vr; (void)v; NO_TYPE("fmi3SetClock", n);
}
fmi3Status fmi3GetIntervalDecimal(fmi3Instance c, const fmi3ValueReference vr[], size_t n, fmi3Float64 iv[],
                                  fmi3IntervalQualifier q[]) {
    (void)vr; (void)n; (void)iv; (void)q; return refuse(c, "fmi3GetIntervalDecimal", CLOCKS);
}
fmi3Status fmi3GetIntervalFraction(fmi3Instance c, const fmi3ValueReference vr[], size_t n, fmi3UInt64 k[],
                                   fmi3UInt64 r[], fmi3IntervalQualifier q[]) {
    (void)vr; (void)n; (void)k; (void)r; (void)q; return refuse(c, "fmi3GetIntervalFraction", CLOCKS);
}
fmi3Status fmi3GetShiftDecimal(fmi3Instance c, const fmi3ValueReference vr[], size_t n, fmi3Float64 s[]) {
    (void)vr; (void)n; (void)s; return refuse(c, "fmi3GetShiftDecimal", CLOCKS);
}
fmi3Status fmi3GetShiftFraction(fmi3Instance c, const fmi3ValueReference vr[], size_t n, fmi3UInt64 k[],
                                fmi3UInt64 r[]) {
    (void)vr; (void)n; (void)k; (void)r; return refuse(c, "fmi3GetShiftFraction", CLOCKS);
}
fmi3Status fmi3SetIntervalDecimal(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const fmi3Float64 iv[]) {
    (void)vr; (void)n; (void)iv; return refuse(c, "fmi3SetIntervalDecimal", CLOCKS);
}
fmi3Status fmi3SetIntervalFraction(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const fmi3UInt64 k[],
                                   const fmi3UInt64 r[]) {
    (void)vr; (void)n; (void)k; (void)r; return refuse(c, "fmi3SetIntervalFraction", CLOCKS);
}
fmi3Status fmi3SetShiftDecimal(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const fmi3Float64 s[]) {
    (void)vr; (void)n; (void)s; return refuse(c, "fmi3SetShiftDecimal", CLOCKS);
}
fmi3Status fmi3SetShiftFraction(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const fmi3UInt64 k[],
                                const fmi3UInt64 r[]) {
    (void)vr; (void)n; (void)k; (void)r; return refuse(c, "fmi3SetShiftFraction", CLOCKS);
}
fmi3Status fmi3ActivateModelPartition(fmi3Instance c, fmi3ValueReference clock, fmi3Float64 t) {
    (void)clock; (void)t; return refuse(c, "fmi3ActivateModelPartition", "scheduled execution is not supported");
}

#define NO_DEPS "the dependencies are in the modelDescription's ModelStructure"
fmi3Status fmi3GetNumberOfVariableDependencies(fmi3Instance c, fmi3ValueReference vr, size_t *n) {
    (void)vr; (void)n; return refuse(c, "fmi3GetNumberOfVariableDependencies", NO_DEPS);
}
fmi3Status fmi3GetVariableDependencies(fmi3Instance c, fmi3ValueReference dep, size_t ei[], fmi3ValueReference iv[],
                                       size_t eii[], fmi3DependencyKind k[], size_t n) {
    (void)dep; (void)ei; (void)iv; (void)eii; (void)k; (void)n;
    return refuse(c, "fmi3GetVariableDependencies", NO_DEPS);
}

#define NO_DERIV "providesDirectionalDerivatives and providesAdjointDerivatives are false"
fmi3Status fmi3GetDirectionalDerivative(fmi3Instance c, const fmi3ValueReference u[], size_t nu,
                                        const fmi3ValueReference k[], size_t nk, const fmi3Float64 seed[],
                                        size_t ns, fmi3Float64 sens[], size_t nsens) {
    (void)u; (void)nu; (void)k; (void)nk; (void)seed; (void)ns; (void)sens; (void)nsens;
    return refuse(c, "fmi3GetDirectionalDerivative", NO_DERIV);
}
fmi3Status fmi3GetAdjointDerivative(fmi3Instance c, const fmi3ValueReference u[], size_t nu,
                                    const fmi3ValueReference k[], size_t nk, const fmi3Float64 seed[], size_t ns,
                                    fmi3Float64 sens[], size_t nsens) {
    (void)u; (void)nu; (void)k; (void)nk; (void)seed; (void)ns; (void)sens; (void)nsens;
    return refuse(c, "fmi3GetAdjointDerivative", NO_DERIV);
}
fmi3Status fmi3GetOutputDerivatives(fmi3Instance c, const fmi3ValueReference vr[], size_t n, const fmi3Int32 o[],
                                    fmi3Float64 v[], size_t nv) {
    (void)vr; (void)n; (void)o; (void)v; (void)nv;
    return refuse(c, "fmi3GetOutputDerivatives", "maxOutputDerivativeOrder is 0");
}

#define CS_ONLY "this FMU supports co-simulation only (no model exchange, no event mode)"
#define CS_ONLY_FN(name) fmi3Status name(fmi3Instance c) { return refuse(c, #name, CS_ONLY); }
CS_ONLY_FN(fmi3EnterConfigurationMode)
CS_ONLY_FN(fmi3ExitConfigurationMode)
CS_ONLY_FN(fmi3EnterEventMode)
CS_ONLY_FN(fmi3EvaluateDiscreteStates)
CS_ONLY_FN(fmi3EnterContinuousTimeMode)

fmi3Status fmi3UpdateDiscreteStates(fmi3Instance c, fmi3Boolean *a, fmi3Boolean *b, fmi3Boolean *d, fmi3Boolean *e,
                                    fmi3Boolean *f, fmi3Float64 *t) {
    (void)a; (void)b; (void)d; (void)e; (void)f; (void)t; return refuse(c, "fmi3UpdateDiscreteStates", CS_ONLY);
}
fmi3Status fmi3CompletedIntegratorStep(fmi3Instance c, fmi3Boolean np, fmi3Boolean *em, fmi3Boolean *ts) {
    (void)np; (void)em; (void)ts; return refuse(c, "fmi3CompletedIntegratorStep", CS_ONLY);
}
fmi3Status fmi3SetTime(fmi3Instance c, fmi3Float64 t) { (void)t; return refuse(c, "fmi3SetTime", CS_ONLY); }
#define STATES_FN(name) fmi3Status name(fmi3Instance c, fmi3Float64 x[], size_t n) { \
        (void)x; (void)n; return refuse(c, #name, CS_ONLY); }
STATES_FN(fmi3GetContinuousStateDerivatives)
STATES_FN(fmi3GetEventIndicators)
STATES_FN(fmi3GetContinuousStates)
STATES_FN(fmi3GetNominalsOfContinuousStates)
fmi3Status fmi3SetContinuousStates(fmi3Instance c, const fmi3Float64 x[], size_t n) {
    (void)x; (void)n; return refuse(c, "fmi3SetContinuousStates", CS_ONLY);
}
fmi3Status fmi3GetNumberOfEventIndicators(fmi3Instance c, size_t *n) {
    (void)n; return refuse(c, "fmi3GetNumberOfEventIndicators", CS_ONLY);
}
fmi3Status fmi3GetNumberOfContinuousStates(fmi3Instance c, size_t *n) {
    (void)n; return refuse(c, "fmi3GetNumberOfContinuousStates", CS_ONLY);
}

/* The other kinds of instance: NULL, with the reason logged to the host. */
fmi3Instance fmi3InstantiateModelExchange(fmi3String name, fmi3String token, fmi3String res, fmi3Boolean visible,
                                          fmi3Boolean logging, fmi3InstanceEnvironment env,
                                          fmi3LogMessageCallback logger) {
    (void)token; (void)res; (void)visible; (void)logging; (void)name;
    if (logger) logger(env, fmi3Error, "logStatusError", "fmi3InstantiateModelExchange: " CS_ONLY);
    return NULL;
}
fmi3Instance fmi3InstantiateScheduledExecution(fmi3String name, fmi3String token, fmi3String res, fmi3Boolean visible,
                                               fmi3Boolean logging, fmi3InstanceEnvironment env,
                                               fmi3LogMessageCallback logger, fmi3ClockUpdateCallback cu,
                                               fmi3LockPreemptionCallback lp, fmi3UnlockPreemptionCallback up) {
    (void)name; (void)token; (void)res; (void)visible; (void)logging; (void)cu; (void)lp; (void)up;
    if (logger) logger(env, fmi3Error, "logStatusError", "fmi3InstantiateScheduledExecution: " CS_ONLY);
    return NULL;
}
