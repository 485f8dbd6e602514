/* The standalone FMU's initialisation (sa_core.h): the parameters set before it, applied at the
   start time as the Simulator that the other flavours build with them applies them
   (mbsd_twin.fmi.native.build_simulator; how each kind is applied: mbsd_twin.fmi.standalone.parameters). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sa_core.h"

#define ASSEMBLY_TOL 1e-12  /* Dynamics.constrained_state's tolerance */
#define ASSEMBLY_LEFT 1e-8  /* the largest residual accepted (StartValues.impose) */

void sa_write_fb(SaInst *s, uint32_t k) {
    const SaModel *m = s->m;
    for (i64 j = m->par_off[k]; j < m->par_off[k + 1]; j++) s->fb[m->par_idx[j]] = s->par[k];
}

/* "name = value, …" of the changed parameters of `kind` (with asm_only: that move the assembly). */
static void changed_list(SaInst *s, int kind, int asm_only, char *text, size_t size) {
    const SaModel *m = s->m;
    size_t used = 0;
    text[0] = '\0';
    for (uint32_t k = 0; k < m->n_par && used + 1 < size; k++) {
        if (s->par[k] == m->par_start[k] || m->par_kind[k] != kind || (asm_only && !m->par_asm[k])) continue;
        int w = snprintf(text + used, size - used, "%s%s = %.17g", used ? ", " : "", m->par_name[k], s->par[k]);
        if (w < 0) break;
        used += (size_t)w;
    }
}

/* In place: y's positions and velocities onto the constraints at t0, the coordinates fq and
   velocities fv held (nb_assembly.constrained_state). 0, or -1 (the residual left is too large),
   or -2 (the constraints are singular there: the assembly has no LAPACK fallback). */
static int assemble(SaInst *s, double t0, double *y, const i64 *fq, i64 nfq, const i64 *fv, i64 nfv) {
    const SaModel *m = s->m;
    double left = 0.0;
    i64 none = 0;
    Exc exc = NULL;
    int32_t raised = mbsd_sa_constrained(&left, &exc, t0, y, m->n, y + m->n, m->n, nfq ? (i64 *)fq : &none, nfq,
                                         nfv ? (i64 *)fv : &none, nfv, ASSEMBLY_TOL, s->ib, m->nib, s->fb, m->nfb);
    if (raised || left < 0.0) return -2;
    return left <= ASSEMBLY_LEFT ? 0 : -1;
}

static int refuse(SaInst *s, int kind, int how, double t0) {
    char names[600], text[900];
    changed_list(s, kind, kind == PAR_FB, names, sizeof names);
    const char *why = how == -2 ? "the constraints are singular or ill-conditioned there (the standalone FMU's "
                                  "assembly has no least-squares fallback)"
                                : "the constraints cannot be satisfied with them";
    if (kind == PAR_START)
        snprintf(text, sizeof text, "the start values %s cannot be reached at t=%.17g s: %s", names, t0, why);
    else
        snprintf(text, sizeof text, "the mechanism cannot be assembled at t=%.17g s%s%s: %s", t0,
                 names[0] ? " with the parameters " : "", names, why);
    sa_log(s, ST_ERROR, text);
    return ST_ERROR;
}

/* The initial state y at t0: the build's, or assembled again from the mechanism's guess (a changed
   geometry, or another start time of time-dependent constraints), then the start values imposed
   with the others held. ST_OK or ST_ERROR (logged, naming the parameters). */
static int initial_state(SaInst *s, double t0, int geometry, int starts, double *y) {
    const SaModel *m = s->m;
    memcpy(y, m->S0 + 8 + 3 * m->ny, (size_t)m->ny * sizeof(double));
    if (geometry) {
        memcpy(y, m->q_guess, (size_t)m->n * sizeof(double));
        memcpy(y + m->n, m->v_guess, (size_t)m->n * sizeof(double));
        for (i64 k = 2 * m->n; k < m->ny; k++) y[k] = 0.0;
        int how = assemble(s, t0, y, m->pinned, m->npin, NULL, 0);
        if (how) return refuse(s, PAR_FB, how, t0);
        i64 n = 0;  /* the springs' unset free lengths and angles: this pose's (System.set_reference_pose) */
        Exc exc = NULL;
        if (mbsd_sa_reference(&n, &exc, y, m->n, s->ib, m->nib, s->fb, m->nfb, (i64 *)m->ref_sd, m->nref_sd,
                              (i64 *)m->ref_rs, m->nref_rs)) {
            sa_log(s, ST_ERROR, "the engine failed to take the springs' free lengths from the assembled pose");
            return ST_ERROR;
        }
    }
    if (starts) {
        for (uint32_t k = 0; k < m->n_par; k++)
            if (m->par_kind[k] == PAR_START && s->par[k] != m->par_start[k]) y[m->par_index[k]] = s->par[k];
        int how = assemble(s, t0, y, m->hold_q, m->nhq, m->hold_v, m->nhv);
        if (how) return refuse(s, PAR_START, how, t0);
    }
    return ST_OK;
}

/* As the Python slave: the Simulator is built at the start time with the tunable parameters and
   the changed parameters (in the layout with every joint's friction entry if a friction the model as
   built lacks changed; live and plain ones written into the packed model, start values imposed), starting from its initial state with the start inputs (the held inputs follow at the
   next step) and an energy baseline of its own. */
int sa_exit_init(SaInst *s) {
    for (uint32_t k = 0; k < s->m->n_par; k++)  /* a friction the model as built has no entry for */
        if (s->m->par_kind[k] == PAR_LAYOUT && s->par[k] != s->m->par_start[k] && sa_use_model(s, MBSD_MODEL_FULL))
            return ST_ERROR;
    const SaModel *m = s->m;
    double t0 = s->start_time;
    int changed = t0 != 0.0, geometry = t0 != 0.0 && m->timedep, starts = 0;
    for (uint32_t k = 0; k < m->n_par; k++) {
        if (s->par[k] == m->par_start[k]) continue;
        int kind = m->par_kind[k];
        changed = 1;
        if (kind == PAR_LIVE || kind == PAR_FB) sa_write_fb(s, k), geometry |= m->par_asm[k];
        else if (kind == PAR_START) starts = 1;
        else if (kind != PAR_FIXED) sa_apply_tunable(s, kind, s->par[k]);
    }
    if (changed) {
        double y[m->ny];
        if (initial_state(s, t0, geometry, starts, y) != ST_OK) return ST_ERROR;
        memcpy(s->u, m->u0, (size_t)m->nu * sizeof(double));
        i64 ok = 0;
        Exc exc = NULL;
        mbsd_sa_start(&ok, &exc, s->S, m->nS, t0, y, m->ny, s->u, m->nu, s->ib, m->nib, s->fb, m->nfb, s->wb,
                      m->nwb, s->ob, m->nob, s->cb, s->ncb);
        s->changed = s->changed_before = 0;
        s->e0 = 0.0;
        if (sa_evaluate(s)) {
            sa_log(s, ST_ERROR, "the engine failed to evaluate the initial state");
            return ST_ERROR;
        }
        s->e0 = s->vec[m->i_energy];
    }
    s->initialized = 1;
    s->vec_valid = 0;
    return ST_OK;
}
