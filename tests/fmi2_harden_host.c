/* An FMI 2.0 host without Python that abuses the host-independent FMU, for tests/test_fmu_harden.py.

   fmi2_harden_host LIB RESOURCE_URI GUID MODE [INPUT_VR PARAM_VR]

   MODE null:   calls every FMI 2.0 function that takes an instance with NULL, then instantiates,
                steps 10 times, frees the instance (timed) and calls every function again with the
                freed instance and frees it again; prints "<phase> <function> <status>" per call,
                "free_us <microseconds>", "worker <pid>" and, polling /proc for up to 10 s while this
                host lives on, "reaped_ms <ms>" (the worker's pid is gone: no zombie) or "zombie".
   MODE quiet:  instantiates with a logger that prints nothing (as a host that shows the FMI log
                only at debug level); with INPUT_VR, steps 5 times, kills the worker and steps once
                more. Prints "instantiate ok|null" and "step <status>".
   MODE start:  instantiates (the log on stdout), steps 5 times, prints "steps <status of each>".
   MODE timing: with INPUT_VR and PARAM_VR: sets the input and the parameter, then times 20000
                fmi2GetReal calls of each (one variable), prints "get_us <input us> <param us>", then
                times fmi2FreeInstance ("free_us <us>"). */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "fmi2Functions.h"

static int quiet;
static void logger(fmi2ComponentEnvironment env, fmi2String name, fmi2Status status, fmi2String category,
                   fmi2String message, ...) {
    (void)env;
    if (!quiet) fprintf(stdout, "log [%s %d %s] %s\n", name, (int)status, category, message);
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
#define F(name) ((fmi2##name##TYPE *)sym("fmi2" #name))
#define CALL(name, ...) printf("%s fmi2" #name " %d\n", phase, (int)F(name)(c, __VA_ARGS__))
#define CALL0(name) printf("%s fmi2" #name " %d\n", phase, (int)F(name)(c))

/* Every function that takes an instance (fmi2FreeInstance apart), with `c`. */
static void call_all(fmi2Component c, const char *phase) {
    fmi2ValueReference vr[1] = {0};
    fmi2Real r[1] = {0}, dv[1] = {1};
    fmi2Integer i[1] = {0}, order[1] = {1};
    fmi2Boolean b[1] = {0};
    fmi2String str[1] = {""};
    fmi2FMUstate st = NULL;
    fmi2Status stat = fmi2OK;
    fmi2Byte buf[16];
    size_t size = 0;
    CALL(SetDebugLogging, fmi2True, 0, NULL);
    CALL(SetupExperiment, fmi2False, 0.0, 0.0, fmi2False, 0.0);
    CALL0(EnterInitializationMode); CALL0(ExitInitializationMode);
    CALL(GetReal, vr, 1, r); CALL(GetInteger, vr, 0, i); CALL(GetBoolean, vr, 0, b); CALL(GetString, vr, 0, str);
    CALL(SetReal, vr, 1, r); CALL(SetInteger, vr, 0, i); CALL(SetBoolean, vr, 0, b); CALL(SetString, vr, 0, str);
    CALL(GetFMUstate, &st); CALL(SetFMUstate, st); CALL(SerializedFMUstateSize, st, &size);
    CALL(SerializeFMUstate, st, buf, sizeof buf); CALL(DeSerializeFMUstate, buf, sizeof buf, &st);
    CALL(FreeFMUstate, &st);
    CALL(GetDirectionalDerivative, vr, 1, vr, 1, dv, r);
    CALL(SetRealInputDerivatives, vr, 1, order, r); CALL(GetRealOutputDerivatives, vr, 1, order, r);
    CALL(DoStep, 0.0, 1e-3, fmi2True); CALL0(CancelStep);
    CALL(GetStatus, fmi2DoStepStatus, &stat); CALL(GetRealStatus, fmi2LastSuccessfulTime, r);
    CALL(GetIntegerStatus, fmi2DoStepStatus, i); CALL(GetBooleanStatus, fmi2Terminated, b);
    CALL(GetStringStatus, fmi2PendingStatus, str);
    CALL0(Terminate); CALL0(Reset);
}

/* The only child of this process (the worker), or -1. */
static pid_t the_child(void) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/children", (int)getpid());
    FILE *f = fopen(path, "r");
    int pid = -1;
    if (!f || fscanf(f, "%d", &pid) != 1) pid = -1;
    if (f) fclose(f);
    return (pid_t)pid;
}

/* How /proc shows pid: 'Z' (zombie), another state letter, or 0 (gone). */
static char proc_state(pid_t pid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char *ok = fgets(line, sizeof line, f);
    fclose(f);
    char *paren = ok ? strrchr(line, ')') : NULL;
    return paren && paren[1] == ' ' ? paren[2] : '?';
}

static fmi2Component start(const char *uri, const char *guid) {
    static fmi2CallbackFunctions cb = {logger, calloc, free, NULL, NULL};
    fmi2Component c = F(Instantiate)("harden", fmi2CoSimulation, guid, uri, &cb, fmi2False, fmi2False);
    printf("instantiate %s\n", c ? "ok" : "null");
    if (c && (F(SetupExperiment)(c, fmi2False, 0.0, 0.0, fmi2False, 0.0) || F(EnterInitializationMode)(c)
              || F(ExitInitializationMode)(c))) { printf("init failed\n"); exit(4); }
    return c;
}

static void mode_null(const char *uri, const char *guid) {
    call_all(NULL, "null");
    F(FreeInstance)(NULL);
    fmi2Component c = start(uri, guid);
    if (!c) exit(3);
    for (int k = 0; k < 10; k++) F(DoStep)(c, k * 1e-3, 1e-3, fmi2True);
    pid_t worker = the_child();
    double t0 = now();
    F(FreeInstance)(c);
    double took = now() - t0;
    call_all(c, "freed");
    F(FreeInstance)(c);  /* twice: nothing */
    printf("free_us %.1f\nworker %d\n", 1e6 * took, (int)worker);
    for (double t1 = now(); now() - t1 < 10.0;) {
        char s = proc_state(worker);
        if (!s) { printf("reaped_ms %.1f\n", 1e3 * (now() - t0)); return; }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    printf("%s\n", proc_state(worker) == 'Z' ? "zombie" : "alive");
}

static void mode_timing(fmi2Component c, fmi2ValueReference in, fmi2ValueReference par) {
    fmi2Real v = 1.25, p = 1e-7, got = 0.0;
    if (F(SetReal)(c, &in, 1, &v)) { printf("set input failed\n"); exit(5); }
    if (F(SetReal)(c, &par, 1, &p)) printf("set parameter failed\n");  /* after initialisation: may be fixed */
    double us[2];
    for (int which = 0; which < 2; which++) {
        fmi2ValueReference vr = which ? par : in;
        double t0 = now();
        for (int k = 0; k < 20000; k++) F(GetReal)(c, &vr, 1, &got);
        us[which] = 1e6 * (now() - t0) / 20000;
    }
    printf("get_us %.3f %.3f\n", us[0], us[1]);
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: fmi2_harden_host LIB URI GUID MODE [INPUT_VR PARAM_VR]\n"); return 2; }
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(argv[4], "null")) { mode_null(argv[2], argv[3]); return 0; }
    quiet = !strcmp(argv[4], "quiet");
    fmi2Component c = start(argv[2], argv[3]);
    if (!c) return 0;
    if (!strcmp(argv[4], "start")) {
        printf("steps");
        for (int k = 0; k < 5; k++) printf(" %d", (int)F(DoStep)(c, k * 1e-3, 1e-3, fmi2True));
        printf("\n");
    } else if (!strcmp(argv[4], "timing") && argc > 6) {
        mode_timing(c, (fmi2ValueReference)atoi(argv[5]), (fmi2ValueReference)atoi(argv[6]));
        double t0 = now();
        F(FreeInstance)(c);
        printf("free_us %.1f\n", 1e6 * (now() - t0));
        return 0;
    } else if (argc > 5) {
        for (int k = 0; k < 5; k++) F(DoStep)(c, k * 1e-3, 1e-3, fmi2True);
        kill(the_child(), SIGKILL);
        printf("step %d\n", (int)F(DoStep)(c, 5e-3, 1e-3, fmi2True));
    }
    F(FreeInstance)(c);
    return 0;
}
