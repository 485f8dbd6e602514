/* The standalone FMU's variables and steps (sa_core.h): get/set by value reference, parameters,
   doStep (initialisation: sa_init.c). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sa_core.h"

/* by -status (nb_dop853: FAIL_STEP -1 … FAIL_MAX_STEPS -4) */
static const char *const FAILURES[] = {"?", "required step size became too small",
                                       "the saddle-point system became singular or the state non-finite",
                                       "projection onto the constraints failed (singular configuration)",
                                       "too many internal steps in one call (a runaway or very stiff motion)"};

static int kind_of(SaInst *s, uint32_t vr, int32_t *index) {
    if (vr > s->max_vr || !s->vr_kind[vr]) return 0;
    *index = s->vr_index[vr];
    return s->vr_kind[vr];
}

int sa_get(SaInst *s, const uint32_t vr[], size_t n, double value[]) {
    const SaModel *m = s->m;
    char text[160];
    for (size_t k = 0; k < n; k++) {
        int32_t i = 0;
        int kind = kind_of(s, vr[k], &i);
        if ((int64_t)vr[k] == m->time_vr) value[k] = s->S[0];
        else if (kind == 1) value[k] = s->held[i];
        else if (kind == 3) value[k] = s->par[i];
        else if (kind == 2) {
            if (!s->vec_valid && sa_outputs(s)) {  /* computed once per instant, on the first read */
                sa_log(s, ST_ERROR, "the engine failed to evaluate the outputs");
                return ST_ERROR;
            }
            value[k] = s->vec[m->out_pick[i]];
        } else {
            snprintf(text, sizeof text, "unknown value reference %u", vr[k]);
            sa_log(s, ST_ERROR, text);
            return ST_ERROR;
        }
    }
    return ST_OK;
}

/* The options' rtol and max_step from the tunable parameters (solver.max_step <= 0: no limit). */
void sa_apply_tunable(SaInst *s, int kind, double v) {
    if (kind == PAR_RTOL) s->ob[0] = v;
    else s->ob[2] = v <= 0.0 ? INFINITY : v;
    s->vec_valid = 0;
}

/* A fixed parameter before initialisation (applied at exitInitializationMode, sa_init.c): a number
   of the packed model (live, gravity, geometry, a friction of the other layout) within the
   validation's bound, a start value any finite number; one that changes the model's structure
   otherwise (none among the shipped mechanisms) only at its built value. */
static int set_fixed(SaInst *s, int32_t i, double v) {
    const SaModel *m = s->m;
    char text[320];
    if (s->initialized) {
        snprintf(text, sizeof text, "parameter %s is fixed: it can only be set before initialisation", m->par_name[i]);
    } else if (m->par_kind[i] == PAR_FIXED && v != s->par[i]) {
        snprintf(text, sizeof text, "parameter %s: a new value changes the model's structure, which the standalone "
                 "FMU runs as it was built (%.17g); change it in the mechanism file and build again", m->par_name[i],
                 s->par[i]);
    } else if (m->par_kind[i] != PAR_FIXED && !isfinite(v)) {
        snprintf(text, sizeof text, "parameter %s = %.17g rejected: it must be a finite number", m->par_name[i], v);
    } else if ((m->par_kind[i] == PAR_LIVE || m->par_kind[i] == PAR_FB || m->par_kind[i] == PAR_LAYOUT)
               && (v < m->par_min[i] || (m->par_strict[i] && v == m->par_min[i]))) {
        snprintf(text, sizeof text, "parameter %s = %.17g rejected: it must be a finite number %s %g", m->par_name[i], v,
                 m->par_strict[i] ? ">" : ">=", m->par_min[i]);
    } else {
        s->par[i] = v;
        return ST_OK;
    }
    sa_log(s, ST_ERROR, text);
    return ST_ERROR;
}

static int set_parameter(SaInst *s, int32_t i, double v) {
    const SaModel *m = s->m;
    char text[320];
    int kind = m->par_kind[i];
    if (kind != PAR_RTOL && kind != PAR_MAX_STEP) return set_fixed(s, i, v);
    if (kind == PAR_RTOL && !(v > 0.0)) {
        snprintf(text, sizeof text, "parameter %s: rtol must be a positive number, got %.17g", m->par_name[i], v);
        sa_log(s, ST_ERROR, text);
        return ST_ERROR;
    }
    if (kind == PAR_MAX_STEP && isnan(v)) {
        snprintf(text, sizeof text, "parameter %s: max_step must be a number", m->par_name[i]);
        sa_log(s, ST_ERROR, text);
        return ST_ERROR;
    }
    s->par[i] = v;
    if (s->initialized) sa_apply_tunable(s, kind, v);
    return ST_OK;
}

int sa_set(SaInst *s, const uint32_t vr[], size_t n, const double value[]) {
    char text[160];
    for (size_t k = 0; k < n; k++) {
        int32_t i = 0;
        int kind = kind_of(s, vr[k], &i);
        if (kind == 1) {
            if (value[k] != s->held[i]) s->vec_valid = 0;
            s->held[i] = value[k];
        } else if (kind == 3) {
            int st = set_parameter(s, i, value[k]);
            if (st != ST_OK) return st;
        } else {
            snprintf(text, sizeof text, kind == 2 ? "value reference %u is an output: it cannot be set"
                                                  : "unknown value reference %u", vr[k]);
            sa_log(s, ST_ERROR, text);
            return ST_ERROR;
        }
    }
    return ST_OK;
}

int sa_step(SaInst *s, double t, double h) {
    const SaModel *m = s->m;
    char text[400];
    if (!s->initialized) {
        sa_log(s, ST_ERROR, "doStep called before the FMU was initialised");
        return ST_ERROR;
    }
    if (!(isfinite(t) && isfinite(h) && h > 0.0 && isfinite(t + h) && t + h != t)) {
        snprintf(text, sizeof text, "doStep refused (the FMU stays at t=%.17g s): a step of %.17g s from t=%.17g s "
                 "does not reach a new finite time", s->S[0], h, t);
        sa_log(s, ST_ERROR, text);
        return ST_ERROR;
    }
    double now = s->S[0];
    if (fabs(t - now) > 1e-9 * fmax(1.0, fabs(now))) {
        snprintf(text, sizeof text, "doStep from t=%.17g s but the FMU is at t=%.17g s", t, now);
        sa_log(s, ST_DISCARD, text);
        return ST_DISCARD;
    }
    s->vec_valid = 0;
    if (sa_push_inputs(s)) {
        snprintf(text, sizeof text, "doStep from t=%.17g s by %.17g s discarded: an input is not finite", t, h);
        sa_log(s, ST_DISCARD, text);
        return ST_DISCARD;
    }
    double t_end = t + h;
    if (t_end <= s->S[0]) return ST_OK;
    i64 status = 0;
    Exc exc = NULL;
    int32_t raised = mbsd_sa_advance(&status, &exc, s->S, m->nS, t_end, s->changed && s->changed_before, s->wb,
                                     m->nwb, s->ob, m->nob, s->cb, s->ncb);
    s->changed_before = s->changed, s->changed = 0;
    if (raised || status != 0) {
        snprintf(text, sizeof text, "doStep from t=%.17g s by %.17g s discarded: integration failed at t=%.9g s: %s",
                 t, h, s->S[0], raised ? "the engine raised an error" : FAILURES[status <= -1 && status >= -4 ? -status : 0]);
        sa_log(s, ST_DISCARD, text);
        return ST_DISCARD;
    }
    return ST_OK;
}
