/* The standalone FMU's instance (sa_core.h): the compiled stepper of the Simulator in C. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sa_core.h"

static void release(SaInst *s);

/* The table's right-hand side and projection: C functions over the native entry points. */
static i64 rhs_c(double t, double *y, double *dy, i64 n, void *tb) {
    i64 r = 0;
    Exc exc = NULL;
    return mbsd_sa_rhs(&r, &exc, t, y, dy, n, tb) == 0 ? r : 0;
}

static i64 project_c(double t, double *y, i64 n, double tol, void *tb) {
    i64 r = 0;
    Exc exc = NULL;
    return mbsd_sa_project(&r, &exc, t, y, n, tol, tb) == 0 ? r : 0;
}

void sa_log(SaInst *s, int status, const char *text) {
    if (s && s->emit && (s->logging || status != ST_OK)) s->emit(s, status, text);
}

static void *dup_mem(const void *src, size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (p && n) memcpy(p, src, n * size);
    return p;
}

static void index_vrs(SaInst *s) {
    const SaModel *m = s->m;
    for (int kind = 1; kind <= 3; kind++) {
        uint32_t n = kind == 1 ? m->n_in : kind == 2 ? m->n_out : m->n_par;
        const uint32_t *vr = kind == 1 ? m->in_vr : kind == 2 ? m->out_vr : m->par_vr;
        for (uint32_t k = 0; k < n; k++) {
            s->vr_kind[vr[k]] = kind;
            s->vr_index[vr[k]] = (int32_t)k;
        }
    }
}

/* The context buffer: the table (functions and arrays), then the views bind pins. 0 or -1. */
static int bind_context(SaInst *s) {
    const SaModel *m = s->m;
    i64 need = 0, zero = 0;
    Exc exc = NULL;
    if (mbsd_sa_bind(&need, &exc, &zero, 0, s->u, m->nu, s->ib, m->nib, s->fb, m->nfb, s->wb, m->nwb)) return -1;
    free(s->cb);
    s->ncb = (need + 7) / 8;
    s->cb = calloc((size_t)s->ncb, sizeof(i64));
    if (!s->cb) return -1;
    s->cb[TB_RHS] = (i64)(intptr_t)rhs_c;
    s->cb[TB_PROJECT] = (i64)(intptr_t)project_c;
    i64 *slot = s->cb;
    slot[TB_CB] = (i64)(intptr_t)s->cb, slot[TB_CB + 1] = s->ncb;
    slot[TB_U] = (i64)(intptr_t)s->u, slot[TB_U + 1] = m->nu;
    slot[TB_IB] = (i64)(intptr_t)s->ib, slot[TB_IB + 1] = m->nib;
    slot[TB_FB] = (i64)(intptr_t)s->fb, slot[TB_FB + 1] = m->nfb;
    slot[TB_WB] = (i64)(intptr_t)s->wb, slot[TB_WB + 1] = m->nwb;
    i64 got = 0;
    if (mbsd_sa_bind(&got, &exc, s->cb, s->ncb, s->u, m->nu, s->ib, m->nib, s->fb, m->nfb, s->wb, m->nwb)) return -1;
    return got <= 8 * s->ncb ? 0 : -1;
}

/* Back to the state of the build: the Simulator's arrays after construction. */
static void initial_values(SaInst *s) {
    const SaModel *m = s->m;
    memcpy(s->S, m->S0, (size_t)m->nS * sizeof(double));
    memcpy(s->u, m->u0, (size_t)m->nu * sizeof(double));
    memcpy(s->wb, m->wb0, (size_t)m->nwb * sizeof(double));
    memcpy(s->ob, m->ob, (size_t)m->nob * sizeof(double));
    memcpy(s->fb, m->fb, (size_t)m->nfb * sizeof(double));
    s->e0 = m->e0;
    if (m->n_in) memcpy(s->held, m->in_start, m->n_in * sizeof(double));
    if (m->n_par) memcpy(s->par, m->par_start, m->n_par * sizeof(double));
    s->vec_valid = s->changed = s->changed_before = s->initialized = 0;
    s->start_time = 0.0;
}

/* n of the model as built, or of the other layout if larger: the instance's buffers hold either */
static size_t larger(i64 n, i64 n_full) { return (size_t)(n_full > n ? n_full : n); }

int sa_use_model(SaInst *s, const SaModel *m) {
    if (s->m == m) return 0;
    s->m = m;
    memcpy(s->ib, m->ib, (size_t)m->nib * sizeof(i64));
    memcpy(s->fb, m->fb, (size_t)m->nfb * sizeof(double));
    memcpy(s->wb, m->wb0, (size_t)m->nwb * sizeof(double));
    if (bind_context(s)) {
        sa_log(s, ST_ERROR, "the engine's context could not be set up (out of memory?)");
        return -1;
    }
    return 0;
}

SaInst *sa_new(size_t size, const char *name, int logging, sa_emit_fn emit) {
    const SaModel *m = &MBSD_MODEL, *f = MBSD_MODEL_FULL ? MBSD_MODEL_FULL : m;
    SaInst *s = calloc(1, size);
    if (!s) return NULL;
    s->emit = emit, s->logging = logging, s->m = m;
    if (!name) name = "";
    s->name = dup_mem(name, strlen(name) + 1, 1);  /* strdup is POSIX, not C99 */
    s->S = dup_mem(m->S0, (size_t)m->nS, sizeof(double));
    s->u = dup_mem(m->u0, (size_t)m->nu, sizeof(double));
    s->fb = calloc(larger(m->nfb, f->nfb) + 1, sizeof(double));
    s->wb = calloc(larger(m->nwb, f->nwb) + 1, sizeof(double));
    s->ob = dup_mem(m->ob, (size_t)m->nob, sizeof(double));
    s->ib = calloc(larger(m->nib, f->nib) + 1, sizeof(i64));
    s->ri = dup_mem(m->ri, 2 * (size_t)m->nri, sizeof(i64));
    s->er = dup_mem(m->er, (size_t)m->ner, sizeof(i64));
    s->held = calloc(m->n_in + 1, sizeof(double));
    s->par = calloc(m->n_par + 1, sizeof(double));
    s->vec = calloc((size_t)m->nvec + 1, sizeof(double));
    s->max_vr = 0;
    for (uint32_t k = 0; k < m->n_in; k++) if (m->in_vr[k] > s->max_vr) s->max_vr = m->in_vr[k];
    for (uint32_t k = 0; k < m->n_out; k++) if (m->out_vr[k] > s->max_vr) s->max_vr = m->out_vr[k];
    for (uint32_t k = 0; k < m->n_par; k++) if (m->par_vr[k] > s->max_vr) s->max_vr = m->par_vr[k];
    s->vr_kind = calloc(s->max_vr + 1, sizeof(int32_t));
    s->vr_index = calloc(s->max_vr + 1, sizeof(int32_t));
    if (!s->name || !s->S || !s->u || !s->fb || !s->wb || !s->ob || !s->ib || !s->ri || !s->er || !s->held
        || !s->par || !s->vec || !s->vr_kind || !s->vr_index) {
        release(s);
        return NULL;
    }
    index_vrs(s);
    memcpy(s->ib, m->ib, (size_t)m->nib * sizeof(i64));
    initial_values(s);
    s->tag = SA_TAG, s->self = s;
    return s;
}

int sa_start(SaInst *s) {
    char text[300];
    const char *missing = mbsd_sa_cpu_missing();
    if (missing) {  /* the engine's code would stop the host with an illegal instruction */
        snprintf(text, sizeof text, "this FMU's engine was compiled for a CPU with %s, which this one lacks: build "
                 "the FMU with MBSD_TWIN_STANDALONE_CPU=x86-64 (any 64-bit x86)", missing);
        sa_log(s, ST_ERROR, text);
        return -1;
    }
    if (bind_context(s)) {
        sa_log(s, ST_ERROR, "the engine's context could not be set up (out of memory?)");
        return -1;
    }
    return 0;
}

/* Also for an instance sa_new gave up on, before it was recorded as live. */
static void release(SaInst *s) {
    void *p[] = {s->name, s->S, s->u, s->fb, s->wb, s->ob, s->held, s->par, s->vec, s->ib, s->cb, s->ri, s->er,
                 s->vr_kind, s->vr_index};
    for (size_t k = 0; k < sizeof p / sizeof p[0]; k++) free(p[k]);
    free(s);
}

/* mbsd_live, which native_fmu's fmi2_misc.c / fmi3_misc.c and the FMI functions of sa_fmi2.c /
   sa_fmi3.c call first: whether c is an instance this library made and has not freed. The instance
   carries a tag and a pointer to itself, set by sa_new and cleared by sa_free before the memory is
   released. Not a registry of instances in the library's static memory, as the host-independent FMU
   keeps (native_fmu/live_registry.c): a host may unload and load the library again while its
   instances live (Ecos does, between two instantiations of one FMU), which empties such a registry
   and left the first instance refused. */
int mbsd_live(void *c);
int mbsd_live(void *c) {
    const SaInst *s = c;
    return s != 0 && s->tag == SA_TAG && s->self == s;
}

void sa_free(SaInst *s) {
    if (!mbsd_live(s)) return;  /* NULL, or freed already: nothing */
    s->tag = 0, s->self = 0;
    release(s);
}

double sa_time(SaInst *s) { return s->S[0]; }

int sa_reset(SaInst *s) {
    if (sa_use_model(s, &MBSD_MODEL)) return ST_ERROR;
    initial_values(s);
    return ST_OK;
}

int sa_setup(SaInst *s, double start_time) {
    s->start_time = start_time;
    return ST_OK;
}

/* The held inputs to the stepper (CompiledStepper.set_inputs): a restart when one changed.
   0, or -1 when an input is not finite (nothing handed over). */
int sa_push_inputs(SaInst *s) {
    const SaModel *m = s->m;
    int differ = 0;
    for (uint32_t k = 0; k < m->n_in; k++) {
        if (!isfinite(s->held[k])) return -1;
        differ |= s->u[m->in_slot[k]] != s->held[k];
    }
    if (!differ) return 0;
    for (uint32_t k = 0; k < m->n_in; k++) s->u[m->in_slot[k]] = s->held[k];
    s->changed = 1;
    i64 ok = 0;
    Exc exc = NULL;
    mbsd_sa_restart(&ok, &exc, s->S, m->nS, s->u, m->nu, s->ib, m->nib, s->fb, m->nfb, s->wb, m->nwb, s->cb, s->ncb);
    return 0;
}

int sa_evaluate(SaInst *s) {
    const SaModel *m = s->m;
    i64 n = 0;
    Exc exc = NULL;
    int32_t st = mbsd_sa_outputs(&n, &exc, s->S, m->nS, s->u, m->nu, s->ib, m->nib, s->fb, m->nfb, s->wb, m->nwb,
                                 s->cb, s->ncb, s->ri, m->nri, s->er, m->ner, s->e0, s->vec, m->nvec);
    if (st || n != m->nvec) return -1;
    s->vec_valid = 1;
    return 0;
}

int sa_outputs(SaInst *s) {
    const SaModel *m = s->m;
    if (s->vec_valid) return 0;
    if (sa_push_inputs(s)) {
        for (i64 k = 0; k < m->nvec; k++) s->vec[k] = NAN;
        return 0;
    }
    return sa_evaluate(s);
}
