/* A minimal FMI 3.0 co-simulation host without Python, for tests/test_fmu_native3.py.

   fmi3_host LIB RESOURCE_PATH TOKEN N_STEPS STEP TORQUE_VR SWITCH_TIME OUT_VR...

   As tests/fmi2_host.c, through the FMI 3.0 API: dlopen()s the FMU's library, instantiates it for
   co-simulation, sets the torque input to 2 before SWITCH_TIME and -1 from it on (sampled at each
   communication point, as fmpy does with a tabulated input), steps N_STEPS times on fmpy's time grid
   (t_{n+1} = (n+1)*STEP, step = t_{n+1} - t_n) and prints the time and the outputs at t = 0 and
   after every step, one line each (%.17g: exact round trip). fmi3DoStep's lastSuccessfulTime must
   be the step's end. The last line says whether libpython is mapped into this process; the step
   loop's wall time per step goes to stderr. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fmi3Functions.h"

static void logger(fmi3InstanceEnvironment env, fmi3Status status, fmi3String category, fmi3String message) {
    (void)env;
    fprintf(stderr, "[%d %s] %s\n", (int)status, category, message);
}

#define LOAD(name) fmi3##name##TYPE *name = (fmi3##name##TYPE *)dlsym(lib, "fmi3" #name); \
    if (!name) { fprintf(stderr, "missing fmi3" #name "\n"); return 2; }

static int libpython_mapped(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[1024];
    int found = 0;
    while (f && fgets(line, sizeof line, f)) found |= strstr(line, "libpython") != NULL;
    if (f) fclose(f);
    return found;
}

int main(int argc, char **argv) {
    if (argc < 9) { fprintf(stderr, "usage: fmi3_host LIB RESOURCES TOKEN N STEP TORQUE_VR SWITCH OUT_VR...\n"); return 2; }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    LOAD(InstantiateCoSimulation) LOAD(EnterInitializationMode) LOAD(ExitInitializationMode)
    LOAD(SetFloat64) LOAD(GetFloat64) LOAD(DoStep) LOAD(Terminate) LOAD(FreeInstance)
    int n = atoi(argv[4]), n_out = argc - 8;
    double h = atof(argv[5]), t_switch = atof(argv[7]), t = 0.0;
    fmi3ValueReference torque_vr = (fmi3ValueReference)atoi(argv[6]);
    fmi3ValueReference *out_vr = calloc((size_t)n_out, sizeof *out_vr);
    double *out = calloc((size_t)n_out, sizeof *out);
    for (int k = 0; k < n_out; k++) out_vr[k] = (fmi3ValueReference)atoi(argv[8 + k]);
    fmi3Instance c = InstantiateCoSimulation("host", argv[3], argv[2], fmi3False, fmi3False, fmi3False, fmi3False,
                                             NULL, 0, NULL, logger, NULL);
    if (!c) { fprintf(stderr, "fmi3InstantiateCoSimulation returned NULL\n"); return 3; }
    double torque = 2.0;
    if (EnterInitializationMode(c, fmi3False, 0.0, 0.0, fmi3False, 0.0) || SetFloat64(c, &torque_vr, 1, &torque, 1)
        || ExitInitializationMode(c)) { fprintf(stderr, "init failed\n"); return 4; }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int step = 0; step <= n; step++) {
        if (GetFloat64(c, out_vr, (size_t)n_out, out, (size_t)n_out)) { fprintf(stderr, "fmi3GetFloat64 failed\n"); return 5; }
        printf("%.17g", t);
        for (int k = 0; k < n_out; k++) printf(" %.17g", out[k]);
        putchar('\n');
        if (step == n) break;
        double next = 0.0 + (step + 1) * h, last = -1.0;
        fmi3Boolean event = fmi3True, terminate = fmi3True, early = fmi3True;
        torque = t >= t_switch ? -1.0 : 2.0;
        int st = SetFloat64(c, &torque_vr, 1, &torque, 1);
        if (!st) st = DoStep(c, t, next - t, fmi3True, &event, &terminate, &early, &last);
        if (st || event || terminate || early || last != t + (next - t)) {
            fprintf(stderr, "step %d failed: status %d, eventHandlingNeeded %d, terminateSimulation %d, earlyReturn %d, "
                    "lastSuccessfulTime %.17g\n", step, st, (int)event, (int)terminate, (int)early, last);
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
