/* A C host without Python for the standalone FMU (FMI 2.0 or 3.0): how long it takes to start and
   to free, for tests/test_fmu_standalone_startup.py and benchmarks/bench_fmu.py.

   standalone_start_host 2|3 LIB TOKEN N_STEPS STEP TORQUE_VR OUT_VR...

   Times (CLOCK_MONOTONIC, microseconds):
   - "open": dlopen of the library and the lookup of its functions;
   - "first": from before dlopen to the first step's outputs (dlopen, instantiate, initialise with
     the torque at 2 N.m, one step of STEP s, every output read);
   - "instantiate": fmi2Instantiate / fmi3InstantiateCoSimulation alone;
   - "step": per communication step of the N_STEPS that follow (set the torque, step, read every
     output); "step_cpu": the same in this process's CPU time (CLOCK_PROCESS_CPUTIME_ID: without the
     time other processes of a loaded machine held the core);
   - "free": fmi2FreeInstance / fmi3FreeInstance (after Terminate);
   and prints "theta" (the first output after the last step, %.17g) as a check. Exit status 0 on
   success, the failing stage otherwise (no resource path is passed: the standalone FMU reads no
   file). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fmi2Functions.h"
#include "fmi3Functions.h"

static double clock_us(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return 1e6 * (double)t.tv_sec + 1e-3 * (double)t.tv_nsec;
}

static double now_us(void) { return clock_us(CLOCK_MONOTONIC); }
static double cpu_us(void) { return clock_us(CLOCK_PROCESS_CPUTIME_ID); }

static void log2_(fmi2ComponentEnvironment e, fmi2String n, fmi2Status s, fmi2String c, fmi2String m, ...) {
    (void)e; (void)n; (void)c;
    fprintf(stderr, "[%d] %s\n", (int)s, m);
}

static void log3_(fmi3InstanceEnvironment e, fmi3Status s, fmi3String c, fmi3String m) {
    (void)e; (void)c;
    fprintf(stderr, "[%d] %s\n", (int)s, m);
}

#define LOAD(v, name) fmi##v##name##TYPE *name = (fmi##v##name##TYPE *)dlsym(lib, "fmi" #v #name); \
    if (!name) { fprintf(stderr, "missing fmi" #v #name "\n"); return 2; }

static int n, n_out;
static double h, torque = 2.0;
static unsigned *vrs;
static double *out;

static int run2(void *lib, const char *token, double t0) {
    LOAD(2, Instantiate) LOAD(2, SetupExperiment) LOAD(2, EnterInitializationMode) LOAD(2, ExitInitializationMode)
    LOAD(2, SetReal) LOAD(2, GetReal) LOAD(2, DoStep) LOAD(2, Terminate) LOAD(2, FreeInstance)
    double t_open = now_us();
    fmi2CallbackFunctions cb = {log2_, calloc, free, NULL, NULL};
    fmi2Component c = Instantiate("start", fmi2CoSimulation, token, "", &cb, fmi2False, fmi2False);
    double t_inst = now_us();
    fmi2ValueReference tvr = vrs[0];
    const fmi2ValueReference *ovr = vrs + 1;
    if (!c || SetupExperiment(c, fmi2False, 0.0, 0.0, fmi2False, 0.0) || EnterInitializationMode(c)
        || SetReal(c, &tvr, 1, &torque) || ExitInitializationMode(c)) { fprintf(stderr, "init failed\n"); return 3; }
    if (DoStep(c, 0.0, h, fmi2True) || GetReal(c, ovr, (size_t)n_out, out)) { fprintf(stderr, "step failed\n"); return 4; }
    double t1 = now_us(), c1 = cpu_us(), t = h;
    for (int k = 1; k <= n; k++) {
        double next = (k + 1) * h;
        if (SetReal(c, &tvr, 1, &torque) || DoStep(c, t, next - t, fmi2True)
            || GetReal(c, ovr, (size_t)n_out, out)) { fprintf(stderr, "step %d failed\n", k); return 5; }
        t = next;
    }
    double t2 = now_us(), c2 = cpu_us();
    if (Terminate(c)) return 6;
    double t3 = now_us();
    FreeInstance(c);
    double t4 = now_us();
    printf("open %.1f\nfirst %.1f\ninstantiate %.1f\nstep %.3f\nstep_cpu %.3f\nfree %.3f\ntheta %.17g\n", t_open - t0,
           t1 - t0, t_inst - t_open, n ? (t2 - t1) / n : 0.0, n ? (c2 - c1) / n : 0.0, t4 - t3, out[0]);
    return 0;
}

static int run3(void *lib, const char *token, double t0) {
    LOAD(3, InstantiateCoSimulation) LOAD(3, EnterInitializationMode) LOAD(3, ExitInitializationMode)
    LOAD(3, SetFloat64) LOAD(3, GetFloat64) LOAD(3, DoStep) LOAD(3, Terminate) LOAD(3, FreeInstance)
    double t_open = now_us();
    fmi3Instance c = InstantiateCoSimulation("start", token, "", fmi3False, fmi3False, fmi3False, fmi3False, NULL, 0,
                                             NULL, log3_, NULL);
    double t_inst = now_us();
    fmi3ValueReference tvr = vrs[0];
    const fmi3ValueReference *ovr = vrs + 1;
    fmi3Boolean event, terminate, early;
    fmi3Float64 last;
    if (!c || EnterInitializationMode(c, fmi3False, 0.0, 0.0, fmi3False, 0.0) || SetFloat64(c, &tvr, 1, &torque, 1)
        || ExitInitializationMode(c)) { fprintf(stderr, "init failed\n"); return 3; }
    if (DoStep(c, 0.0, h, fmi3True, &event, &terminate, &early, &last)
        || GetFloat64(c, ovr, (size_t)n_out, out, (size_t)n_out)) { fprintf(stderr, "step failed\n"); return 4; }
    double t1 = now_us(), c1 = cpu_us(), t = h;
    for (int k = 1; k <= n; k++) {
        double next = (k + 1) * h;
        if (SetFloat64(c, &tvr, 1, &torque, 1) || DoStep(c, t, next - t, fmi3True, &event, &terminate, &early, &last)
            || GetFloat64(c, ovr, (size_t)n_out, out, (size_t)n_out)) { fprintf(stderr, "step %d failed\n", k); return 5; }
        t = next;
    }
    double t2 = now_us(), c2 = cpu_us();
    if (Terminate(c)) return 6;
    double t3 = now_us();
    FreeInstance(c);
    double t4 = now_us();
    printf("open %.1f\nfirst %.1f\ninstantiate %.1f\nstep %.3f\nstep_cpu %.3f\nfree %.3f\ntheta %.17g\n", t_open - t0,
           t1 - t0, t_inst - t_open, n ? (t2 - t1) / n : 0.0, n ? (c2 - c1) / n : 0.0, t4 - t3, out[0]);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 8) { fprintf(stderr, "usage: standalone_start_host 2|3 LIB TOKEN N STEP TORQUE_VR OUT_VR...\n"); return 2; }
    n = atoi(argv[4]);
    h = atof(argv[5]);
    n_out = argc - 7;
    vrs = calloc((size_t)n_out + 1, sizeof *vrs);
    out = calloc((size_t)n_out, sizeof *out);
    for (int k = 0; k <= n_out; k++) vrs[k] = (unsigned)atoi(argv[6 + k]);
    double t0 = now_us();
    void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    return argv[1][0] == '3' ? run3(lib, argv[3], t0) : run2(lib, argv[3], t0);
}
