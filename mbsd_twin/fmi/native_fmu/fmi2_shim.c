/* FMI 2.0 co-simulation API of mbsd-twin's host-independent FMU.

   No Python in the host process: each instance starts a worker process (worker_link.c) that runs
   mbsd_twin.fmi.worker, which serves the model with the same slave logic as the PythonFMU FMU.
   Per communication step the host's calls cost one round trip: inputs set with fmi2SetReal are
   held here and sent with the next request; fmi2DoStep returns the outputs at the new time when
   the host read outputs after the previous step, and fmi2GetReal on outputs is then served from
   them until an input changes.

   Built by mbsd_twin.fmi.native_build with gcc; MBSD_GUID is the modelDescription's guid. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fmi2Functions.h"
#include "worker_link.h"

#ifndef MBSD_GUID
#error "compile with -DMBSD_GUID=\"{...}\" (the modelDescription's guid)"
#endif
#define PYTHON_ENV "MBSD_TWIN_FMU_PYTHON"
#define PYTHON_FILE "mbsd_twin_python.txt"

typedef struct {
    WorkerLink link;
    fmi2CallbackFunctions cb;
    char *name;
    int logging;
    uint32_t n_in, n_out, max_vr;
    uint32_t *in_vr, *out_vr;
    int32_t *in_slot, *out_slot;  /* by value reference: input / output position, -1 */
    char *pending; double *pend_val; uint32_t *set_vr; double *set_val;
    double *outs;
    int outs_valid, outs_read;
    double time;  /* after the last successful doStep (or the start time) */
} Inst;

static const char *category(int status) {
    static const char *cats[] = {"logStatusOK", "logStatusWarning", "logStatusDiscard", "logStatusError",
                                 "logStatusFatal", "logStatusPending"};
    return status >= 0 && status <= 5 ? cats[status] : "logAll";
}

/* The host's logger treats the message as a format: pass '%' doubled. */
static void log_msg(void *ctx, int status, const char *text) {
    Inst *s = ctx;
    if (!s->cb.logger || (status == fmi2OK && !s->logging)) return;
    size_t n = strlen(text);
    char *esc = malloc(2 * n + 1), *q = esc;
    if (!esc) return;
    for (const char *p = text; *p; p++) { *q++ = *p; if (*p == '%') *q++ = '%'; }
    *q = '\0';
    s->cb.logger(s->cb.componentEnvironment, s->name, (fmi2Status)status, category(status), esc);
    free(esc);
}

/* file:///a/b, file:/a/b or a plain path -> /a/b (percent escapes decoded); malloc'd */
static char *uri_to_path(const char *uri) {
    const char *p = uri;
    if (!strncmp(p, "file://", 7)) p += 7; else if (!strncmp(p, "file:", 5)) p += 5;
    if (!strncmp(p, "localhost/", 10)) p += 9;
    char *out = malloc(strlen(p) + 1), *q = out;
    if (!out) return NULL;
    for (; *p; p++) {
        unsigned v;
        if (*p == '%' && sscanf(p + 1, "%2x", &v) == 1) { *q++ = (char)v; p += 2; } else *q++ = *p;
    }
    while (q > out + 1 && q[-1] == '/') q--;
    *q = '\0';
    return out;
}

/* The interpreter: $MBSD_TWIN_FMU_PYTHON, else the first line of resources/mbsd_twin_python.txt. */
static int find_python(const char *res, char *python, size_t n, char *origin, size_t n_origin) {
    const char *env = getenv(PYTHON_ENV);
    if (env && *env) {
        snprintf(python, n, "%s", env);
        snprintf(origin, n_origin, "interpreter from $%s:", PYTHON_ENV);
        return 0;
    }
    char file[4096];
    snprintf(file, sizeof file, "%s/%s", res, PYTHON_FILE);
    snprintf(origin, n_origin, "interpreter recorded in resources/%s:", PYTHON_FILE);
    FILE *f = fopen(file, "r");
    if (!f || !fgets(python, (int)n, f)) { if (f) fclose(f); return -1; }
    fclose(f);
    python[strcspn(python, "\r\n")] = '\0';
    return *python ? 0 : -1;
}

static void free_inst(Inst *s) {
    free(s->name); free(s->in_vr); free(s->out_vr); free(s->in_slot); free(s->out_slot);
    free(s->pending); free(s->pend_val); free(s->set_vr); free(s->set_val); free(s->outs);
    free(s);
}

/* The HELLO reply: [n_in, input vrs..., n_out, output vrs...] as doubles. */
static int take_layout(Inst *s) {
    const double *r = s->link.reals;
    uint32_t n = s->link.n_real, k = 0;
    if (n < 2) return -1;
    s->n_in = (uint32_t)r[k++];
    if (s->n_in + 2 > n) return -1;
    s->in_vr = calloc(s->n_in + 1, 4);
    if (!s->in_vr) return -1;
    for (uint32_t i = 0; i < s->n_in; i++) s->in_vr[i] = (uint32_t)r[k++];
    s->n_out = (uint32_t)r[k++];
    if (k + s->n_out != n) return -1;
    s->out_vr = calloc(s->n_out + 1, 4);
    if (!s->out_vr) return -1;
    for (uint32_t i = 0; i < s->n_out; i++) s->out_vr[i] = (uint32_t)r[k++];
    s->max_vr = 0;
    for (uint32_t i = 0; i < s->n_in; i++) if (s->in_vr[i] >= s->max_vr) s->max_vr = s->in_vr[i] + 1;
    for (uint32_t i = 0; i < s->n_out; i++) if (s->out_vr[i] >= s->max_vr) s->max_vr = s->out_vr[i] + 1;
    s->in_slot = malloc(4u * (s->max_vr + 1)); s->out_slot = malloc(4u * (s->max_vr + 1));
    s->pending = calloc(s->n_in + 1, 1); s->pend_val = calloc(s->n_in + 1, 8);
    s->set_vr = calloc(s->n_in + 1, 4); s->set_val = calloc(s->n_in + 1, 8); s->outs = calloc(s->n_out + 1, 8);
    if (!s->in_slot || !s->out_slot || !s->pending || !s->pend_val || !s->set_vr || !s->set_val || !s->outs) return -1;
    for (uint32_t v = 0; v <= s->max_vr; v++) s->in_slot[v] = s->out_slot[v] = -1;
    for (uint32_t i = 0; i < s->n_in; i++) s->in_slot[s->in_vr[i]] = (int32_t)i;
    for (uint32_t i = 0; i < s->n_out; i++) s->out_slot[s->out_vr[i]] = (int32_t)i;
    return 0;
}

fmi2Component fmi2Instantiate(fmi2String name, fmi2Type type, fmi2String guid, fmi2String resource_uri,
                              const fmi2CallbackFunctions *cb, fmi2Boolean visible, fmi2Boolean logging) {
    (void)visible;
    Inst *s = calloc(1, sizeof *s);
    if (!s || !cb) { free(s); return NULL; }
    s->cb = *cb; s->logging = logging; s->name = strdup(name ? name : "");
    if (!s->name) { free(s); return NULL; }
    s->link.sock = -1; s->link.log = log_msg; s->link.log_ctx = s;
    char python[4096], origin[128];
    char *res = resource_uri ? uri_to_path(resource_uri) : NULL;
    if (type != fmi2CoSimulation) log_msg(s, fmi2Error, "this FMU supports co-simulation only");
    else if (!guid || strcmp(guid, MBSD_GUID)) log_msg(s, fmi2Error, "the GUID does not match this FMU's "
                                                                        "modelDescription (" MBSD_GUID ")");
    else if (!res) log_msg(s, fmi2Error, "no fmuResourceLocation given: the worker needs the FMU's resources");
    else if (find_python(res, python, sizeof python, origin, sizeof origin))
        log_msg(s, fmi2Error, "no Python interpreter configured: set the environment variable " PYTHON_ENV " to a "
                "Python 3.11+ with mbsd-twin installed (resources/" PYTHON_FILE " is missing or empty)");
    else if (access(python, X_OK)) {
        char text[4800];
        snprintf(text, sizeof text, "the mbsd-twin worker could not start: %s %s is not an executable file. The FMU "
                 "needs a Python 3.11+ with mbsd-twin installed (python -m pip install mbsd-twin); point the "
                 "environment variable " PYTHON_ENV " at that interpreter", origin, python);
        log_msg(s, fmi2Error, text);
    } else if (!link_start(&s->link, python, origin, res, s->name) && !take_layout(s)) {
        char text[4800];
        snprintf(text, sizeof text, "mbsd-twin worker started: pid %d, %s %s", (int)s->link.pid, origin, python);
        log_msg(s, fmi2OK, text);
        free(res);
        return s;
    } else if (!s->link.dead && s->link.sock >= 0) log_msg(s, fmi2Error, "the worker's reply to the start was malformed");
    link_stop(&s->link);
    free(res);
    free_inst(s);
    return NULL;
}

void fmi2FreeInstance(fmi2Component c) {
    Inst *s = c;
    if (!s) return;
    link_stop(&s->link);
    free_inst(s);
}

/* Send a request carrying the held inputs; the reply's status (fmi2Error when the worker is gone). */
static fmi2Status call(Inst *s, Request *rq) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_in; i++)
        if (s->pending[i]) { s->set_vr[n] = s->in_vr[i]; s->set_val[n++] = s->pend_val[i]; s->pending[i] = 0; }
    rq->n_set = n; rq->set_vr = s->set_vr; rq->set_val = s->set_val;
    if (link_call(&s->link, rq)) return fmi2Error;
    return (fmi2Status)s->link.status;
}

void mbsd_log_error(fmi2Component c, const char *text);
void mbsd_set_logging(fmi2Component c, int on);
double mbsd_last_time(fmi2Component c);
void mbsd_log_error(fmi2Component c, const char *text) { log_msg(c, fmi2Error, text); }
void mbsd_set_logging(fmi2Component c, int on) { ((Inst *)c)->logging = on; }
double mbsd_last_time(fmi2Component c) { return ((Inst *)c)->time; }

static fmi2Status simple(fmi2Component c, uint32_t op, double value) {
    Inst *s = c;
    Request rq = {.op = op, .n_real = op == OP_SETUP ? 1 : 0, .real = &value};
    s->outs_valid = 0;
    return call(s, &rq);
}

fmi2Status fmi2SetupExperiment(fmi2Component c, fmi2Boolean tol_defined, fmi2Real tol, fmi2Real start,
                               fmi2Boolean stop_defined, fmi2Real stop) {
    (void)tol_defined; (void)tol; (void)stop_defined; (void)stop;  /* as the PythonFMU FMU: set solver.rtol */
    ((Inst *)c)->time = start;
    return simple(c, OP_SETUP, start);
}

fmi2Status fmi2EnterInitializationMode(fmi2Component c) { return ((Inst *)c)->link.dead ? fmi2Error : fmi2OK; }
fmi2Status fmi2ExitInitializationMode(fmi2Component c) { return simple(c, OP_EXIT_INIT, 0.0); }
fmi2Status fmi2Terminate(fmi2Component c) { return ((Inst *)c)->link.dead ? fmi2Error : fmi2OK; }

fmi2Status fmi2Reset(fmi2Component c) {
    Inst *s = c;
    memset(s->pending, 0, s->n_in);
    return simple(c, OP_RESET, 0.0);
}

fmi2Status fmi2GetReal(fmi2Component c, const fmi2ValueReference vr[], size_t n, fmi2Real value[]) {
    Inst *s = c;
    int cached = s->outs_valid;
    for (size_t i = 0; i < n && cached; i++) cached = vr[i] < s->max_vr && s->out_slot[vr[i]] >= 0;
    s->outs_read = 1;
    if (cached) {
        for (size_t i = 0; i < n; i++) value[i] = s->outs[s->out_slot[vr[i]]];
        return fmi2OK;
    }
    Request rq = {.op = OP_GET_REAL, .n_vr = (uint32_t)n, .vr = vr};
    fmi2Status st = call(s, &rq);
    if (st <= fmi2Warning && s->link.n_real == n) memcpy(value, s->link.reals, 8 * n);
    else if (st <= fmi2Warning) st = fmi2Error;
    return st;
}

fmi2Status fmi2SetReal(fmi2Component c, const fmi2ValueReference vr[], size_t n, const fmi2Real value[]) {
    Inst *s = c;
    int inputs = !s->link.dead;
    for (size_t i = 0; i < n && inputs; i++) inputs = vr[i] < s->max_vr && s->in_slot[vr[i]] >= 0;
    s->outs_valid = 0;
    if (inputs) {  /* held here, sent with the next request */
        for (size_t i = 0; i < n; i++) { int32_t k = s->in_slot[vr[i]]; s->pending[k] = 1; s->pend_val[k] = value[i]; }
        return fmi2OK;
    }
    Request rq = {.op = OP_SET_REAL, .n_vr = (uint32_t)n, .vr = vr, .n_real = (uint32_t)n, .real = value};
    return call(s, &rq);
}

fmi2Status fmi2DoStep(fmi2Component c, fmi2Real t, fmi2Real h, fmi2Boolean no_prior) {
    Inst *s = c;
    (void)no_prior;
    double th[2] = {t, h};
    int want = s->outs_read || !s->outs_valid;
    Request rq = {.op = OP_DO_STEP, .flags = want ? FLAG_WANT_OUTPUTS : 0, .n_real = 2, .real = th};
    s->outs_valid = 0;
    s->outs_read = 0;
    fmi2Status st = call(s, &rq);
    if (st == fmi2OK) s->time = t + h;
    if (st == fmi2OK && want && s->link.n_real == s->n_out) {
        memcpy(s->outs, s->link.reals, 8u * s->n_out);
        s->outs_valid = 1;
    }
    return st;
}

fmi2Status fmi2CancelStep(fmi2Component c) { (void)c; return fmi2Error; }  /* doStep is synchronous */

/* --------------------------------------------------------------------------- FMU state */
typedef struct { char magic[8]; size_t size; unsigned char data[]; } Blob;
static const char MAGIC[8] = "mbsdst1";

static Blob *new_blob(const void *data, size_t size) {
    Blob *b = malloc(sizeof *b + size);
    if (!b) return NULL;
    memcpy(b->magic, MAGIC, 8); b->size = size; memcpy(b->data, data, size);
    return b;
}

static Blob *as_blob(fmi2FMUstate st) {
    Blob *b = st;
    return b && !memcmp(b->magic, MAGIC, 8) ? b : NULL;
}

fmi2Status fmi2GetFMUstate(fmi2Component c, fmi2FMUstate *state) {
    Inst *s = c;
    Request rq = {.op = OP_GET_STATE};
    fmi2Status st = call(s, &rq);
    if (st > fmi2Warning) return st;
    Blob *b = new_blob(s->link.bytes, s->link.n_bytes);
    if (!b) { log_msg(s, fmi2Error, "out of memory for the FMU state"); return fmi2Error; }
    free(as_blob(*state));
    *state = b;
    return st;
}

fmi2Status fmi2SetFMUstate(fmi2Component c, fmi2FMUstate state) {
    Inst *s = c;
    Blob *b = as_blob(state);
    if (!b) { log_msg(s, fmi2Error, "fmi2SetFMUstate: not a state of this FMU"); return fmi2Error; }
    memset(s->pending, 0, s->n_in);  /* the state carries its own inputs */
    s->outs_valid = 0;
    Request rq = {.op = OP_SET_STATE, .n_bytes = (uint32_t)b->size, .bytes = b->data};
    fmi2Status st = call(s, &rq);
    if (st == fmi2OK && s->link.n_real == 1) s->time = s->link.reals[0];  /* the restored time */
    return st;
}

fmi2Status fmi2FreeFMUstate(fmi2Component c, fmi2FMUstate *state) {
    (void)c;
    if (state) { free(as_blob(*state)); *state = NULL; }
    return fmi2OK;
}

fmi2Status fmi2SerializedFMUstateSize(fmi2Component c, fmi2FMUstate state, size_t *size) {
    Blob *b = as_blob(state);
    if (!b) { log_msg(c, fmi2Error, "not a state of this FMU"); return fmi2Error; }
    *size = b->size;
    return fmi2OK;
}

fmi2Status fmi2SerializeFMUstate(fmi2Component c, fmi2FMUstate state, fmi2Byte out[], size_t size) {
    Blob *b = as_blob(state);
    if (!b || size < b->size) { log_msg(c, fmi2Error, "not a state of this FMU, or the buffer is too small"); return fmi2Error; }
    memcpy(out, b->data, b->size);
    return fmi2OK;
}

fmi2Status fmi2DeSerializeFMUstate(fmi2Component c, const fmi2Byte in[], size_t size, fmi2FMUstate *state) {
    Blob *b = new_blob(in, size);  /* checked by the worker at fmi2SetFMUstate */
    if (!b) { log_msg(c, fmi2Error, "out of memory for the FMU state"); return fmi2Error; }
    free(as_blob(*state));
    *state = b;
    return fmi2OK;
}
