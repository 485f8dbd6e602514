/* The instance logic shared by the FMI 2.0 and FMI 3.0 libraries (see shim_core.h). */
#define _GNU_SOURCE
#include "shim_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void core_log(Inst *s, int status, const char *text) {
    if (s && s->emit && (status != ST_OK || s->logging)) s->emit(s, status, text);
}

static void link_log(void *ctx, int status, const char *text) { core_log(ctx, status, text); }

char *core_uri_to_path(const char *uri) {
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

/* The first line of resources/<file> into buf; 0 if there is one. */
static int read_line(const char *res, const char *file, char *buf, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", res, file);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)n, f)) { if (f) fclose(f); return -1; }
    fclose(f);
    buf[strcspn(buf, "\r\n")] = '\0';
    return *buf ? 0 : -1;
}

/* The interpreter: $MBSD_TWIN_FMU_PYTHON, else the first line of resources/mbsd_twin_python.txt. */
static int find_python(const char *res, char *python, size_t n, char *origin, size_t n_origin) {
    const char *env = getenv(PYTHON_ENV);
    if (env && *env) {
        snprintf(python, n, "%s", env);
        snprintf(origin, n_origin, "interpreter from $%s:", PYTHON_ENV);
        return 0;
    }
    snprintf(origin, n_origin, "interpreter recorded in resources/%s:", PYTHON_FILE);
    return read_line(res, PYTHON_FILE, python, n);
}

/* The bound on every reply: $MBSD_TWIN_FMU_TIMEOUT, else resources/mbsd_twin_timeout.txt (seconds),
   else the FMU's step time limit (from the worker) + TIMEOUT_MARGIN. */
static void set_timeout(Inst *s, const char *res, double step_limit) {
    char line[64];
    const char *env = getenv(TIMEOUT_ENV);
    const char *text = env && *env ? env : read_line(res, TIMEOUT_FILE, line, sizeof line) ? NULL : line;
    char *end = NULL;
    double v = text ? strtod(text, &end) : 0.0;
    if (text && (end == text || !(v > 0) || v > 1e9)) {
        char msg[256];
        snprintf(msg, sizeof msg, "ignored reply bound '%.60s' (%s): not a positive number of seconds", text,
                 env && *env ? "$" TIMEOUT_ENV : "resources/" TIMEOUT_FILE);
        core_log(s, ST_WARNING, msg);
        v = 0;
    }
    s->link.timeout = v > 0 ? v : step_limit + TIMEOUT_MARGIN;
}

void core_free(Inst *s) {
    if (!s) return;
    link_stop(&s->link);
    free(s->name); free(s->in_vr); free(s->out_vr); free(s->in_slot); free(s->out_slot);
    free(s->pending); free(s->pend_val); free(s->set_vr); free(s->set_val); free(s->outs);
    free(s);
}

Inst *core_new(size_t size, const char *name, int logging, emit_fn emit, const char *const *op_names) {
    Inst *s = calloc(1, size);
    if (!s) return NULL;
    s->name = strdup(name ? name : "");
    if (!s->name) { free(s); return NULL; }
    s->logging = logging; s->emit = emit;
    s->link.sock = -1; s->link.log = link_log; s->link.log_ctx = s; s->link.op_names = op_names;
    return s;
}

/* The HELLO reply: [n_in, input vrs..., n_out, output vrs..., step time limit] as doubles. */
static int take_layout(Inst *s, double *step_limit) {
    const double *r = s->link.reals;
    uint32_t n = s->link.n_real, k = 0;
    if (n < 3) return -1;
    s->n_in = (uint32_t)r[k++];
    if (s->n_in + 3 > n) return -1;
    s->in_vr = calloc(s->n_in + 1, 4);
    if (!s->in_vr) return -1;
    for (uint32_t i = 0; i < s->n_in; i++) s->in_vr[i] = (uint32_t)r[k++];
    s->n_out = (uint32_t)r[k++];
    if (k + s->n_out + 1 != n) return -1;
    s->out_vr = calloc(s->n_out + 1, 4);
    if (!s->out_vr) return -1;
    for (uint32_t i = 0; i < s->n_out; i++) s->out_vr[i] = (uint32_t)r[k++];
    *step_limit = r[k];
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

int core_start(Inst *s, const char *res) {
    char python[4096], origin[128], text[4800];
    double step_limit = 0.0;
    if (find_python(res, python, sizeof python, origin, sizeof origin)) {
        core_log(s, ST_ERROR, "no Python interpreter configured: set the environment variable " PYTHON_ENV " to a "
                 "Python 3.11+ with mbsd-twin installed (resources/" PYTHON_FILE " is missing or empty)");
        return -1;
    }
    if (access(python, X_OK)) {
        snprintf(text, sizeof text, "the mbsd-twin worker could not start: %s %s is not an executable file. The FMU "
                 "needs a Python 3.11+ with mbsd-twin installed (python -m pip install mbsd-twin); point the "
                 "environment variable " PYTHON_ENV " at that interpreter", origin, python);
        core_log(s, ST_ERROR, text);
        return -1;
    }
    if (link_start(&s->link, python, origin, res, s->name)) return -1;
    if (take_layout(s, &step_limit)) {
        core_log(s, ST_ERROR, "the worker's reply to the start was malformed (library and worker of different "
                 "versions?)");
        return -1;
    }
    set_timeout(s, res, step_limit);
    snprintf(text, sizeof text, "mbsd-twin worker started: pid %d, %s %s; replies awaited for at most %g s",
             (int)s->link.pid, origin, python, s->link.timeout);
    core_log(s, ST_OK, text);
    return 0;
}

/* Send a request carrying the held inputs; the reply's status (Error when the worker is gone). */
static int call(Inst *s, Request *rq) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_in; i++)
        if (s->pending[i]) { s->set_vr[n] = s->in_vr[i]; s->set_val[n++] = s->pend_val[i]; s->pending[i] = 0; }
    rq->n_set = n; rq->set_vr = s->set_vr; rq->set_val = s->set_val;
    if (link_call(&s->link, rq)) return ST_ERROR;
    return s->link.status;
}

int core_simple(Inst *s, uint32_t op, double value) {
    Request rq = {.op = op, .n_real = op == OP_SETUP ? 1 : 0, .real = &value};
    if (op == OP_SETUP) s->time = value;
    if (op == OP_RESET) memset(s->pending, 0, s->n_in);
    s->outs_valid = 0;
    return call(s, &rq);
}

int core_get(Inst *s, const uint32_t vr[], size_t n, double value[]) {
    int cached = s->outs_valid;
    for (size_t i = 0; i < n && cached; i++) cached = vr[i] < s->max_vr && s->out_slot[vr[i]] >= 0;
    s->outs_read = 1;
    if (cached) {
        for (size_t i = 0; i < n; i++) value[i] = s->outs[s->out_slot[vr[i]]];
        return ST_OK;
    }
    Request rq = {.op = OP_GET_REAL, .n_vr = (uint32_t)n, .vr = vr};
    int st = call(s, &rq);
    if (st <= ST_WARNING && s->link.n_real == n) memcpy(value, s->link.reals, 8 * n);
    else if (st <= ST_WARNING) st = ST_ERROR;
    return st;
}

int core_set(Inst *s, const uint32_t vr[], size_t n, const double value[]) {
    int inputs = !s->link.dead;
    for (size_t i = 0; i < n && inputs; i++) inputs = vr[i] < s->max_vr && s->in_slot[vr[i]] >= 0;
    s->outs_valid = 0;
    if (inputs) {  /* held here, sent with the next request */
        for (size_t i = 0; i < n; i++) { int32_t k = s->in_slot[vr[i]]; s->pending[k] = 1; s->pend_val[k] = value[i]; }
        return ST_OK;
    }
    Request rq = {.op = OP_SET_REAL, .n_vr = (uint32_t)n, .vr = vr, .n_real = (uint32_t)n, .real = value};
    return call(s, &rq);
}

int core_step(Inst *s, double t, double h) {
    double th[2] = {t, h};
    int want = s->outs_read || !s->outs_valid;
    Request rq = {.op = OP_DO_STEP, .flags = want ? FLAG_WANT_OUTPUTS : 0, .n_real = 2, .real = th};
    s->outs_valid = 0;
    s->outs_read = 0;
    int st = call(s, &rq);
    if (st == ST_OK) s->time = t + h;
    if (st == ST_OK && want && s->link.n_real == s->n_out) {
        memcpy(s->outs, s->link.reals, 8u * s->n_out);
        s->outs_valid = 1;
    }
    return st;
}

/* --------------------------------------------------------------------------- FMU state */
static const char MAGIC[8] = "mbsdst1";

static Blob *new_blob(const void *data, size_t size) {
    Blob *b = malloc(sizeof *b + size);
    if (!b) return NULL;
    memcpy(b->magic, MAGIC, 8); b->size = size; memcpy(b->data, data, size);
    return b;
}

static Blob *as_blob(void *st) {
    Blob *b = st;
    return b && !memcmp(b->magic, MAGIC, 8) ? b : NULL;
}

int core_get_state(Inst *s, void **state) {
    Request rq = {.op = OP_GET_STATE};
    int st = call(s, &rq);
    if (st > ST_WARNING) return st;
    Blob *b = new_blob(s->link.bytes, s->link.n_bytes);
    if (!b) { core_log(s, ST_ERROR, "out of memory for the FMU state"); return ST_ERROR; }
    free(as_blob(*state));
    *state = b;
    return st;
}

int core_set_state(Inst *s, void *state) {
    Blob *b = as_blob(state);
    if (!b) { core_log(s, ST_ERROR, "setting the FMU state: not a state of this FMU"); return ST_ERROR; }
    memset(s->pending, 0, s->n_in);  /* the state carries its own inputs */
    s->outs_valid = 0;
    Request rq = {.op = OP_SET_STATE, .n_bytes = (uint32_t)b->size, .bytes = b->data};
    int st = call(s, &rq);
    if (st == ST_OK && s->link.n_real == 1) s->time = s->link.reals[0];  /* the restored time */
    return st;
}

void core_free_state(void **state) {
    if (state) { free(as_blob(*state)); *state = NULL; }
}

int core_state_size(Inst *s, void *state, size_t *size) {
    Blob *b = as_blob(state);
    if (!b) { core_log(s, ST_ERROR, "not a state of this FMU"); return ST_ERROR; }
    *size = b->size;
    return ST_OK;
}

int core_serialize(Inst *s, void *state, unsigned char out[], size_t size) {
    Blob *b = as_blob(state);
    if (!b || size < b->size) { core_log(s, ST_ERROR, "not a state of this FMU, or the buffer is too small"); return ST_ERROR; }
    memcpy(out, b->data, b->size);
    return ST_OK;
}

int core_deserialize(Inst *s, const unsigned char in[], size_t size, void **state) {
    Blob *b = new_blob(in, size);  /* checked by the worker when set */
    if (!b) { core_log(s, ST_ERROR, "out of memory for the FMU state"); return ST_ERROR; }
    free(as_blob(*state));
    *state = b;
    return ST_OK;
}
