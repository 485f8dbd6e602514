/* A minimal FMI 2.0 co-simulation host without Python, for tests/test_fmu_native.py.

   fmi2_host LIB RESOURCE_URI GUID N_STEPS STEP TORQUE_VR SWITCH_TIME OUT_VR...

   dlopen()s the FMU's library, instantiates it, sets the torque input to 2 before SWITCH_TIME and
   -1 from it on (sampled at each communication point, as fmpy does with a tabulated input), steps
   N_STEPS times on fmpy's time grid (t_{n+1} = (n+1)*STEP, step = t_{n+1} - t_n) and prints the
   time and the outputs at t = 0 and after every step, one line each (%.17g: exact round trip).
   The last line says whether libpython is mapped into this process; the step loop's wall time
   per step goes to stderr. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmi2Functions.h"

static void logger(fmi2ComponentEnvironment env, fmi2String name, fmi2Status status, fmi2String category,
                   fmi2String message, ...) {
    (void)env;
    va_list ap;
    va_start(ap, message);
    fprintf(stderr, "[%s %d %s] ", name, (int)status, category);
    vfprintf(stderr, message, ap);
    fputc('\n', stderr);
    va_end(ap);
}

#define LOAD(name) fmi2##name##TYPE *name = (fmi2##name##TYPE *)dlsym(lib, "fmi2" #name); \
    if (!name) { fprintf(stderr, "missing fmi2" #name "\n"); return 2; }

static int libpython_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) found |= strstr(line, "libpython") != NULL;
    if (f) fclose(f);
    return found;
}

int main(int argc, char **argv) {
    if (argc < 9) { fprintf(stderr, "usage: fmi2_host LIB URI GUID N STEP TORQUE_VR SWITCH OUT_VR...\n"); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    LOAD(Instantiate) LOAD(SetupExperiment) LOAD(EnterInitializationMode) LOAD(ExitInitializationMode)
    LOAD(SetReal) LOAD(GetReal) LOAD(DoStep) LOAD(Terminate) LOAD(FreeInstance)
    int n = atoi(argv[4]), n_out = argc - 8;
    double h = atof(argv[5]), t_switch = atof(argv[7]), t = 0.0;
    fmi2ValueReference torque_vr = (fmi2ValueReference)atoi(argv[6]);
    fmi2ValueReference *out_vr = calloc((size_t)n_out, sizeof *out_vr);
    double *out = calloc((size_t)n_out, sizeof *out);
    for (int k = 0; k < n_out; k++) out_vr[k] = (fmi2ValueReference)atoi(argv[8 + k]);
    fmi2CallbackFunctions cb = {logger, calloc, free, NULL, NULL};
    fmi2Component c = Instantiate("host", fmi2CoSimulation, argv[3], argv[2], &cb, fmi2False, fmi2False);
    if (!c) { fprintf(stderr, "fmi2Instantiate returned NULL\n"); return 3; }
    double torque = 2.0;
    if (SetupExperiment(c, fmi2False, 0.0, 0.0, fmi2False, 0.0) || EnterInitializationMode(c)
        || SetReal(c, &torque_vr, 1, &torque) || ExitInitializationMode(c)) { fprintf(stderr, "init failed\n"); return 4; }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int step = 0; step <= n; step++) {
        if (GetReal(c, out_vr, (size_t)n_out, out)) { fprintf(stderr, "fmi2GetReal failed\n"); return 5; }
        printf("%.17g", t);
        for (int k = 0; k < n_out; k++) printf(" %.17g", out[k]);
        putchar('\n');
        if (step == n) break;
        double next = 0.0 + (step + 1) * h;
        torque = t >= t_switch ? -1.0 : 2.0;
        if (SetReal(c, &torque_vr, 1, &torque) || DoStep(c, t, next - t, fmi2True)) {
            fprintf(stderr, "step %d failed\n", step);
            return 6;
        }
        t = next;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "step loop: %.1f us per step\n", n ? 1e6 * ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec)) / n : 0.0);
    Terminate(c);
    FreeInstance(c);
    printf("libpython mapped: %d\n", libpython_mapped());
    return 0;
}
