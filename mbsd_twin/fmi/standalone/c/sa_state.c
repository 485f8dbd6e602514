/* The standalone FMU's state (sa_core.h): a copy of everything that makes the instance's future,
   for a bit-identical rollback, and its bytes for serialisation (the packed model's float buffer
   included: the layout, the parameters and the free lengths taken from the assembled pose). The scratch wb is no state (the
   Python slave's state omits it too: every kernel writes it before reading it). */
#include <stdlib.h>
#include <string.h>

#include "sa_core.h"

#define MAGIC "MBSDSA3"

typedef struct {
    char magic[8];
    int64_t nS, nu, n_in, n_par;
    int32_t changed, changed_before, initialized, full;  /* full: MBSD_MODEL_FULL runs */
    double start_time, e0;
    double data[];  /* S, u, held, par, fb (of the larger layout's size) */
} Blob;

static i64 fb_size(void) {
    return MBSD_MODEL_FULL && MBSD_MODEL_FULL->nfb > MBSD_MODEL.nfb ? MBSD_MODEL_FULL->nfb : MBSD_MODEL.nfb;
}

static size_t blob_size(const SaModel *m) {
    return sizeof(Blob) + (size_t)(m->nS + m->nu + m->n_in + m->n_par + fb_size()) * sizeof(double);
}

static int fits(const SaModel *m, const Blob *b) {
    return !memcmp(b->magic, MAGIC, 8) && b->nS == m->nS && b->nu == m->nu && b->n_in == (int64_t)m->n_in
           && b->n_par == (int64_t)m->n_par && (!b->full || MBSD_MODEL_FULL);
}

static void save(SaInst *s, Blob *b) {
    const SaModel *m = s->m;
    memcpy(b->magic, MAGIC, 8);
    b->nS = m->nS, b->nu = m->nu, b->n_in = m->n_in, b->n_par = m->n_par;
    b->changed = s->changed, b->changed_before = s->changed_before, b->initialized = s->initialized;
    b->full = s->m != &MBSD_MODEL;
    b->start_time = s->start_time;
    b->e0 = s->e0;
    double *d = b->data;
    memcpy(d, s->S, (size_t)m->nS * sizeof(double)), d += m->nS;
    memcpy(d, s->u, (size_t)m->nu * sizeof(double)), d += m->nu;
    memcpy(d, s->held, m->n_in * sizeof(double)), d += m->n_in;
    memcpy(d, s->par, m->n_par * sizeof(double)), d += m->n_par;
    memcpy(d, s->fb, (size_t)m->nfb * sizeof(double));
}

static int load(SaInst *s, const Blob *b) {
    if (sa_use_model(s, b->full ? MBSD_MODEL_FULL : &MBSD_MODEL)) return ST_ERROR;
    const SaModel *m = s->m;
    s->changed = b->changed, s->changed_before = b->changed_before, s->initialized = b->initialized;
    s->start_time = b->start_time;
    s->e0 = b->e0;
    const double *d = b->data;
    memcpy(s->S, d, (size_t)m->nS * sizeof(double)), d += m->nS;
    memcpy(s->u, d, (size_t)m->nu * sizeof(double)), d += m->nu;
    memcpy(s->held, d, m->n_in * sizeof(double)), d += m->n_in;
    memcpy(s->par, d, m->n_par * sizeof(double)), d += m->n_par;
    memcpy(s->fb, d, (size_t)m->nfb * sizeof(double));
    for (uint32_t k = 0; k < m->n_par; k++) {
        if (m->par_kind[k] == PAR_RTOL) s->ob[0] = s->par[k];
        if (m->par_kind[k] == PAR_MAX_STEP) s->ob[2] = s->par[k] <= 0.0 ? 1.0 / 0.0 : s->par[k];
    }
    s->vec_valid = 0;
    return ST_OK;
}

int sa_get_state(SaInst *s, void **state) {
    Blob *b = *state;
    if (!b || !fits(s->m, b)) {
        b = malloc(blob_size(s->m));
        if (!b) {
            sa_log(s, ST_ERROR, "out of memory for the FMU state");
            return ST_ERROR;
        }
        if (*state) free(*state);
    }
    save(s, b);
    *state = b;
    return ST_OK;
}

int sa_set_state(SaInst *s, void *state) {
    if (!state || !fits(s->m, state)) {
        sa_log(s, ST_ERROR, "not a state of this FMU");
        return ST_ERROR;
    }
    return load(s, state);
}

void sa_free_state(void **state) {
    if (state && *state) {
        free(*state);
        *state = NULL;
    }
}

int sa_state_size(SaInst *s, void *state, size_t *size) {
    (void)state;
    *size = blob_size(s->m);
    return ST_OK;
}

int sa_serialize(SaInst *s, void *state, unsigned char out[], size_t size) {
    if (!state || !fits(s->m, state) || size < blob_size(s->m)) {
        sa_log(s, ST_ERROR, "fmiSerializeFMUstate: not a state of this FMU, or the buffer is too small");
        return ST_ERROR;
    }
    memcpy(out, state, blob_size(s->m));
    return ST_OK;
}

int sa_deserialize(SaInst *s, const unsigned char in[], size_t size, void **state) {
    Blob *b = size == blob_size(s->m) ? malloc(size) : NULL;
    if (b) memcpy(b, in, size);
    if (!b || !fits(s->m, b)) {
        free(b);
        sa_log(s, ST_ERROR, "fmiDeSerializeFMUstate: these bytes are not a state of this FMU");
        return ST_ERROR;
    }
    *state = b;
    return ST_OK;
}
