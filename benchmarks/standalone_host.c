/* Timing host for benchmarks/bench_standalone.py: a standalone FMI 2.0 FMU without Python.

   standalone_host LIB GUID N_STEPS STEP TORQUE_VR OUT_VR...

   Times (CLOCK_MONOTONIC) dlopen + fmi2Instantiate + initialisation + the first step with its
   output read ("first"), then N_STEPS communication steps of STEP s, each setting the torque
   (2 N·m), stepping and reading every output ("step", per step), and prints both in microseconds
   with θ at the end (the first output) as a check. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fmi2Functions.h"

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e6 * (double)t.tv_sec + 1e-3 * (double)t.tv_nsec;
}

static void logger(fmi2ComponentEnvironment e, fmi2String n, fmi2Status s, fmi2String c, fmi2String m, ...) {
    (void)e; (void)n; (void)c;
    fprintf(stderr, "[%d] %s\n", (int)s, m);
}

#define LOAD(name) fmi2##name##TYPE *name = (fmi2##name##TYPE *)dlsym(lib, "fmi2" #name); \
    if (!name) { fprintf(stderr, "missing fmi2" #name "\n"); return 2; }

int main(int argc, char **argv) {
    if (argc < 7) { fprintf(stderr, "usage: standalone_host LIB GUID N STEP TORQUE_VR OUT_VR...\n"); return 2; }
    int n = atoi(argv[3]), n_out = argc - 6;
    double h = atof(argv[4]), torque = 2.0, t = 0.0;
    fmi2ValueReference tvr = (fmi2ValueReference)atoi(argv[5]), *ovr = calloc((size_t)n_out, sizeof *ovr);
    double *out = calloc((size_t)n_out, sizeof *out);
    for (int k = 0; k < n_out; k++) ovr[k] = (fmi2ValueReference)atoi(argv[6 + k]);
    double t0 = now_us();
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    LOAD(Instantiate) LOAD(SetupExperiment) LOAD(EnterInitializationMode) LOAD(ExitInitializationMode)
    LOAD(SetReal) LOAD(GetReal) LOAD(DoStep) LOAD(Terminate) LOAD(FreeInstance)
    fmi2CallbackFunctions cb = {logger, calloc, free, NULL, NULL};
    fmi2Component c = Instantiate("bench", fmi2CoSimulation, argv[2], "", &cb, fmi2False, fmi2False);
    if (!c || SetupExperiment(c, fmi2False, 0.0, 0.0, fmi2False, 0.0) || EnterInitializationMode(c)
        || SetReal(c, &tvr, 1, &torque) || ExitInitializationMode(c)) { fprintf(stderr, "init failed\n"); return 3; }
    if (DoStep(c, t, h, fmi2True) || GetReal(c, ovr, (size_t)n_out, out)) { fprintf(stderr, "step failed\n"); return 4; }
    t = h;
    double t1 = now_us();
    for (int k = 1; k <= n; k++) {
        double next = (k + 1) * h;
        if (SetReal(c, &tvr, 1, &torque) || DoStep(c, t, next - t, fmi2True)
            || GetReal(c, ovr, (size_t)n_out, out)) { fprintf(stderr, "step %d failed\n", k); return 5; }
        t = next;
    }
    double t2 = now_us();
    printf("first %.1f\nstep %.3f\ntheta %.17g\n", t1 - t0, n ? (t2 - t1) / n : 0.0, out[0]);
    Terminate(c);
    FreeInstance(c);
    return 0;
}
