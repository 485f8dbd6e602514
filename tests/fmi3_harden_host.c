/* An FMI 3.0 host without Python that abuses the host-independent FMU, for tests/test_fmu_harden.py.

   fmi3_harden_host LIB RESOURCE_PATH TOKEN MODE

   As tests/fmi2_harden_host.c, through the FMI 3.0 API. MODE null: every FMI 3.0 function that
   takes an instance, with NULL, then with a freed instance ("<phase> <function> <status>"),
   "free_us", "worker", "reaped_ms" or "zombie". MODE quiet: instantiate with logMessage NULL,
   print "instantiate ok|null". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "fmi3Functions.h"

static void logger(fmi3InstanceEnvironment env, fmi3Status status, fmi3String category, fmi3String message) {
    (void)env;
    printf("log [%d %s] %s\n", (int)status, category, message);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *lib;
static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) { fprintf(stderr, "missing %s\n", name); exit(2); }
    return p;
}
#define F(name) ((fmi3##name##TYPE *)sym("fmi3" #name))
#define CALL(name, ...) printf("%s fmi3" #name " %d\n", phase, (int)F(name)(c, __VA_ARGS__))
#define CALL0(name) printf("%s fmi3" #name " %d\n", phase, (int)F(name)(c))
#define GET_SET(T, CT) do { CT v_[1] = {0}; CALL(Get##T, vr, 0, v_, 0); CALL(Set##T, vr, 0, v_, 0); } while (0)

/* Every function that takes an instance (fmi3FreeInstance apart), with `c`. */
static void call_all(fmi3Instance c, const char *phase) {
    fmi3ValueReference vr[1] = {1};
    fmi3Float64 r[1] = {0}, seed[1] = {1};
    fmi3UInt64 u[1] = {0};
    fmi3Int32 order[1] = {1};
    fmi3Boolean b[4] = {0};
    fmi3IntervalQualifier q[1];
    fmi3Clock clk[1] = {0};
    fmi3Binary bin[1] = {NULL};
    fmi3DependencyKind kind[1];
    fmi3FMUState st = NULL;
    fmi3Byte buf[16] = {0};
    size_t size = 0, sizes[1] = {0}, idx[1] = {0};
    CALL(SetDebugLogging, fmi3True, 0, NULL);
    CALL(EnterInitializationMode, fmi3False, 0.0, 0.0, fmi3False, 0.0); CALL0(ExitInitializationMode);
    CALL0(EnterEventMode); CALL0(EnterStepMode); CALL0(EnterConfigurationMode); CALL0(ExitConfigurationMode);
    CALL0(EvaluateDiscreteStates); CALL0(EnterContinuousTimeMode);
    CALL(GetFloat64, vr, 1, r, 1); CALL(SetFloat64, vr, 1, r, 1);
    GET_SET(Float32, fmi3Float32); GET_SET(Int8, fmi3Int8); GET_SET(UInt8, fmi3UInt8); GET_SET(Int16, fmi3Int16);
    GET_SET(UInt16, fmi3UInt16); GET_SET(Int32, fmi3Int32); GET_SET(UInt32, fmi3UInt32); GET_SET(Int64, fmi3Int64);
    GET_SET(UInt64, fmi3UInt64); GET_SET(Boolean, fmi3Boolean); GET_SET(String, fmi3String);
    CALL(GetBinary, vr, 0, sizes, bin, 0); CALL(SetBinary, vr, 0, sizes, (const fmi3Binary *)bin, 0);
    CALL(GetClock, vr, 0, clk); CALL(SetClock, vr, 0, clk);
    CALL(GetIntervalDecimal, vr, 1, r, q); CALL(GetIntervalFraction, vr, 1, u, u, q);
    CALL(GetShiftDecimal, vr, 1, r); CALL(GetShiftFraction, vr, 1, u, u);
    CALL(SetIntervalDecimal, vr, 1, r); CALL(SetIntervalFraction, vr, 1, u, u);
    CALL(SetShiftDecimal, vr, 1, r); CALL(SetShiftFraction, vr, 1, u, u);
    CALL(ActivateModelPartition, vr[0], 0.0);
    CALL(GetNumberOfVariableDependencies, vr[0], &size);
    CALL(GetVariableDependencies, vr[0], idx, vr, idx, kind, 1);
    CALL(GetFMUState, &st); CALL(SetFMUState, st); CALL(SerializedFMUStateSize, st, &size);
    CALL(SerializeFMUState, st, buf, sizeof buf); CALL(DeserializeFMUState, buf, sizeof buf, &st);
    CALL(FreeFMUState, &st);
    CALL(GetDirectionalDerivative, vr, 1, vr, 1, seed, 1, r, 1);
    CALL(GetAdjointDerivative, vr, 1, vr, 1, seed, 1, r, 1);
    CALL(GetOutputDerivatives, vr, 1, order, r, 1);
    CALL(UpdateDiscreteStates, b, b, b, b, b, r);
    CALL(CompletedIntegratorStep, fmi3True, b, b); CALL(SetTime, 0.0);
    CALL(GetContinuousStateDerivatives, r, 1); CALL(GetEventIndicators, r, 1); CALL(GetContinuousStates, r, 1);
    CALL(GetNominalsOfContinuousStates, r, 1); CALL(SetContinuousStates, r, 1);
    CALL(GetNumberOfEventIndicators, &size); CALL(GetNumberOfContinuousStates, &size);
    CALL(DoStep, 0.0, 1e-3, fmi3True, b, b + 1, b + 2, r);
    CALL0(Terminate); CALL0(Reset);
}

static pid_t the_child(void) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "r");
    int pid = -1;
    if (!f || fscanf(f, "%d", &pid) != 1) pid = -1;
    if (f) fclose(f);
    return (pid_t)pid;
}

static int proc_gone(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    return access(path, F_OK) != 0;
}

static int proc_zombie(pid_t pid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    char *ok = f ? fgets(line, sizeof line, f) : NULL;
    if (f) fclose(f);
    char *paren = ok ? strrchr(line, ')') : NULL;
    return paren && paren[1] == ' ' && paren[2] == 'Z';
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: fmi3_harden_host LIB RESOURCES TOKEN MODE\n"); return 2; }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int null_mode = !strcmp(argv[4], "null");
    if (null_mode) { call_all(NULL, "null"); F(FreeInstance)(NULL); }
    fmi3Instance c = F(InstantiateCoSimulation)("harden", argv[3], argv[2], fmi3False, fmi3False, fmi3False,
                                                fmi3False, NULL, 0, NULL, null_mode ? logger : NULL, NULL);
    printf("instantiate %s\n", c ? "ok" : "null");
    if (!c || !null_mode) { F(FreeInstance)(c); return 0; }
    if (F(EnterInitializationMode)(c, fmi3False, 0.0, 0.0, fmi3False, 0.0) || F(ExitInitializationMode)(c)) return 4;
    fmi3Boolean b[3];
    fmi3Float64 last;
    for (int k = 0; k < 10; k++) F(DoStep)(c, k * 1e-3, 1e-3, fmi3True, b, b + 1, b + 2, &last);
    pid_t worker = the_child();
    double t0 = now();
    F(FreeInstance)(c);
    double took = now() - t0;
    call_all(c, "freed");
    F(FreeInstance)(c);
    printf("free_us %.1f\nworker %d\n", 1e6 * took, (int)worker);
    for (double t1 = now(); now() - t1 < 10.0;) {
        if (proc_gone(worker)) { printf("reaped_ms %.1f\n", 1e3 * (now() - t0)); return 0; }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    printf("%s\n", proc_zombie(worker) ? "zombie" : "alive");
    return 0;
}
