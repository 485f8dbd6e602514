/* The instance logic shared by the FMI 2.0 and FMI 3.0 libraries (see shim_core.h). */
#define _GNU_SOURCE
#include "shim_core.h"
#include "live_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void core_log(Inst *s, int status, const char *text) {
    if (s && s->emit && (status != ST_OK || s->logging)) s->emit(s, status, text);
}

void core_alert(Inst *s, const char *text) {
    core_log(s, ST_ERROR, text);
    fprintf(stderr, "mbsd-twin FMU instance '%s': %s\n", s && s->name ? s->name : "", text);
    fflush(stderr);
}

int core_live(const void *c) { return mbsd_live_has(c); }

int core_usable(const void *c) { return core_live(c) && !((const Inst *)c)->link.dead ? ST_OK : ST_ERROR; }

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

/* The bound on every reply: $MBSD_TWIN_FMU_TIMEOUT, else resources/mbsd_twin_timeout.txt (seconds),
   else the FMU's step time limit (from the worker) + TIMEOUT_MARGIN. */
static void set_timeout(Inst *s, const char *res, double step_limit) {
    char line[64];
    const char *env = getenv(TIMEOUT_ENV);
    const char *text = env && *env ? env : core_read_line(res, TIMEOUT_FILE, line, sizeof line) ? NULL : line;
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
    if (!mbsd_live_remove(s)) return;  /* NULL, or freed already */
    link_stop(&s->link);
    free(s->name); free(s->in_vr); free(s->out_vr); free(s->par_vr); free(s->val_slot); free(s->out_slot);
    free(s->vals); free(s->known); free(s->pending); free(s->set_vr); free(s->set_val); free(s->outs);
    free(s);
}

Inst *core_new(size_t size, const char *name, int logging, emit_fn emit, const char *const *op_names) {
    Inst *s = calloc(1, size);
    if (!s) return NULL;
    s->name = strdup(name ? name : "");
    if (!s->name) { free(s); return NULL; }
    s->logging = logging; s->emit = emit;
    s->link.sock = -1; s->link.log = link_log; s->link.log_ctx = s; s->link.op_names = op_names;
    if (!mbsd_live_add(s)) { free(s->name); free(s); return NULL; }
    return s;
}

/* n value references from r[*k] on (as doubles) into a new array; NULL if they do not fit in n_real */
static uint32_t *take_vrs(const double *r, uint32_t n_real, uint32_t *k, uint32_t n) {
    if (n > n_real - *k) return NULL;
    uint32_t *v = calloc(n + 1, 4);
    for (uint32_t i = 0; v && i < n; i++) v[i] = (uint32_t)r[(*k)++];
    return v;
}

/* The inputs' and parameters' values (a reply's reals from `at` on): known if they are all there. */
static void take_values(Inst *s, const double *r, uint32_t n) {
    uint32_t m = s->n_in + s->n_par;
    if (n == m) memcpy(s->vals, r, 8u * m);
    memset(s->known, n == m, m);
}

static int32_t slot_of(const int32_t *slots, uint32_t max_vr, uint32_t vr) { return vr < max_vr ? slots[vr] : -1; }

/* The HELLO reply: [n_in, input vrs..., n_out, output vrs..., step time limit, n_par, parameter
   vrs..., the values of the inputs and parameters] as doubles. */
static int take_layout(Inst *s, double *step_limit) {
    const double *r = s->link.reals;
    uint32_t n = s->link.n_real, k = 0, m;
    if (n < 4) return -1;
    s->n_in = (uint32_t)r[k++];
    if (!(s->in_vr = take_vrs(r, n, &k, s->n_in)) || k >= n) return -1;
    s->n_out = (uint32_t)r[k++];
    if (!(s->out_vr = take_vrs(r, n, &k, s->n_out)) || k + 2 > n) return -1;
    *step_limit = r[k++];
    s->n_par = (uint32_t)r[k++];
    if (!(s->par_vr = take_vrs(r, n, &k, s->n_par))) return -1;
    m = s->n_in + s->n_par;
    if (k + m != n) return -1;
    s->max_vr = 0;
    for (uint32_t i = 0; i < m; i++) {
        uint32_t v = i < s->n_in ? s->in_vr[i] : s->par_vr[i - s->n_in];
        if (v >= s->max_vr) s->max_vr = v + 1;
    }
    for (uint32_t i = 0; i < s->n_out; i++) if (s->out_vr[i] >= s->max_vr) s->max_vr = s->out_vr[i] + 1;
    s->val_slot = malloc(4u * (s->max_vr + 1)); s->out_slot = malloc(4u * (s->max_vr + 1));
    s->vals = calloc(m + 1, 8); s->known = calloc(m + 1, 1); s->pending = calloc(s->n_in + 1, 1);
    s->set_vr = calloc(s->n_in + 1, 4); s->set_val = calloc(s->n_in + 1, 8); s->outs = calloc(s->n_out + 1, 8);
    if (!s->val_slot || !s->out_slot || !s->vals || !s->known || !s->pending || !s->set_vr || !s->set_val || !s->outs)
        return -1;
    for (uint32_t v = 0; v <= s->max_vr; v++) s->val_slot[v] = s->out_slot[v] = -1;
    for (uint32_t i = 0; i < m; i++) s->val_slot[i < s->n_in ? s->in_vr[i] : s->par_vr[i - s->n_in]] = (int32_t)i;
    for (uint32_t i = 0; i < s->n_out; i++) s->out_slot[s->out_vr[i]] = (int32_t)i;
    take_values(s, r + k, m);
    return 0;
}

int core_start(Inst *s, const char *res) {
    char python[4096], origin[128], why[12000], text[16500];
    double step_limit = 0.0;
    int found = core_find_python(res, python, sizeof python, origin, sizeof origin, why, sizeof why);
    if (found < 0) {
        snprintf(text, sizeof text, "the mbsd-twin worker could not start: no Python interpreter found (%s). The FMU "
                 "needs a Python 3.11+ with mbsd-twin installed (" MBSD_TWIN_INSTALL "): point the environment variable "
                 PYTHON_ENV " at that interpreter, or put it on PATH as python3", why);
        core_alert(s, text);
        return -1;
    }
    if (found > 0) {
        snprintf(text, sizeof text, "using the %s %s (%s)", origin, python, why);
        core_log(s, ST_WARNING, text);
    }
    if (link_start(&s->link, python, origin, res, s->name)) return -1;
    if (take_layout(s, &step_limit)) {
        core_alert(s, "the worker's reply to the start was malformed (library and worker of different versions?)");
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
        if (s->pending[i]) { s->set_vr[n] = s->in_vr[i]; s->set_val[n++] = s->vals[i]; s->pending[i] = 0; }
    rq->n_set = n; rq->set_vr = s->set_vr; rq->set_val = s->set_val;
    if (link_call(&s->link, rq)) return ST_ERROR;
    return s->link.status;
}

int core_simple(Inst *s, uint32_t op, double value) {
    if (!core_live(s)) return ST_ERROR;
    Request rq = {.op = op, .n_real = op == OP_SETUP ? 1 : 0, .real = &value};
    if (op == OP_SETUP) s->time = value;
    if (op == OP_RESET) memset(s->pending, 0, s->n_in);
    s->outs_valid = 0;
    int st = call(s, &rq);
    if (op == OP_RESET) take_values(s, s->link.reals, st <= ST_WARNING ? s->link.n_real : 0);  /* the start values */
    return st;
}

int core_get(Inst *s, const uint32_t vr[], size_t n, double value[]) {
    if (!core_live(s) || (n && (!vr || !value))) return ST_ERROR;
    int cached = !s->link.dead, outputs = 0;  /* a dead worker: refused, with the message, as every call */
    for (size_t i = 0; i < n && cached; i++) {
        int32_t o = slot_of(s->out_slot, s->max_vr, vr[i]), v = slot_of(s->val_slot, s->max_vr, vr[i]);
        outputs |= v < 0;
        cached = (o >= 0 && s->outs_valid) || (v >= 0 && s->known[v]);
    }
    if (outputs || !cached) s->outs_read = 1;
    if (cached) {  /* outputs of the last step, inputs and parameters: no round trip */
        for (size_t i = 0; i < n; i++) {
            int32_t o = slot_of(s->out_slot, s->max_vr, vr[i]);
            value[i] = o >= 0 ? s->outs[o] : s->vals[s->val_slot[vr[i]]];
        }
        return ST_OK;
    }
    Request rq = {.op = OP_GET_REAL, .n_vr = (uint32_t)n, .vr = vr};
    int st = call(s, &rq);
    if (st <= ST_WARNING && s->link.n_real == n) memcpy(value, s->link.reals, 8 * n);
    else if (st <= ST_WARNING) st = ST_ERROR;
    for (size_t i = 0; i < n && st <= ST_WARNING; i++) {
        int32_t v = slot_of(s->val_slot, s->max_vr, vr[i]);
        if (v >= 0) { s->vals[v] = value[i]; s->known[v] = 1; }
    }
    return st;
}

int core_set(Inst *s, const uint32_t vr[], size_t n, const double value[]) {
    if (!core_live(s) || (n && (!vr || !value))) return ST_ERROR;
    int inputs = !s->link.dead;
    for (size_t i = 0; i < n && inputs; i++) {
        int32_t v = slot_of(s->val_slot, s->max_vr, vr[i]);
        inputs = v >= 0 && (uint32_t)v < s->n_in;
    }
    s->outs_valid = 0;
    if (inputs) {  /* held here, sent with the next request */
        for (size_t i = 0; i < n; i++) {
            int32_t k = s->val_slot[vr[i]];
            s->pending[k] = 1; s->vals[k] = value[i]; s->known[k] = 1;
        }
        return ST_OK;
    }
    Request rq = {.op = OP_SET_REAL, .n_vr = (uint32_t)n, .vr = vr, .n_real = (uint32_t)n, .real = value};
    int st = call(s, &rq);
    for (size_t i = 0; i < n; i++) {  /* what the worker took; unknown (asked again) after a refusal */
        int32_t v = slot_of(s->val_slot, s->max_vr, vr[i]);
        if (v >= 0) { s->vals[v] = value[i]; s->known[v] = st <= ST_WARNING; }
    }
    return st;
}

int core_step(Inst *s, double t, double h) {
    if (!core_live(s)) return ST_ERROR;
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
    if (!core_live(s) || !state) return ST_ERROR;
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
    if (!core_live(s)) return ST_ERROR;
    Blob *b = as_blob(state);
    if (!b) { core_log(s, ST_ERROR, "setting the FMU state: not a state of this FMU"); return ST_ERROR; }
    memset(s->pending, 0, s->n_in);  /* the state carries its own inputs */
    s->outs_valid = 0;
    Request rq = {.op = OP_SET_STATE, .n_bytes = (uint32_t)b->size, .bytes = b->data};
    int st = call(s, &rq);
    if (st == ST_OK && s->link.n_real >= 1) s->time = s->link.reals[0];  /* the restored time */
    take_values(s, s->link.reals + 1, st == ST_OK && s->link.n_real >= 1 ? s->link.n_real - 1 : 0);  /* its inputs, parameters */
    return st;
}

void core_free_state(void **state) {
    if (state) { free(as_blob(*state)); *state = NULL; }
}

int core_state_size(Inst *s, void *state, size_t *size) {
    if (!core_live(s) || !size) return ST_ERROR;
    Blob *b = as_blob(state);
    if (!b) { core_log(s, ST_ERROR, "not a state of this FMU"); return ST_ERROR; }
    *size = b->size;
    return ST_OK;
}

int core_serialize(Inst *s, void *state, unsigned char out[], size_t size) {
    if (!core_live(s) || !out) return ST_ERROR;
    Blob *b = as_blob(state);
    if (!b || size < b->size) { core_log(s, ST_ERROR, "not a state of this FMU, or the buffer is too small"); return ST_ERROR; }
    memcpy(out, b->data, b->size);
    return ST_OK;
}

int core_deserialize(Inst *s, const unsigned char in[], size_t size, void **state) {
    if (!core_live(s) || !in || !state) return ST_ERROR;
    Blob *b = new_blob(in, size);  /* checked by the worker when set */
    if (!b) { core_log(s, ST_ERROR, "out of memory for the FMU state"); return ST_ERROR; }
    free(as_blob(*state));
    *state = b;
    return ST_OK;
}
