/* Speed set-point profile: 0 until ramp_start, a linear ramp to ramp_speed at ramp_end, then
   ramp_speed; step_speed from step_time on. No inputs; the output at the end of each step is the
   profile at t + h. */
#include "model.h"

static double profile(const Model *m, double t) {
    double t0 = m->v[VR_RAMP_START], t1 = m->v[VR_RAMP_END];
    if (t >= m->v[VR_STEP_TIME]) return m->v[VR_STEP_SPEED];
    if (t <= t0) return 0.0;
    if (t >= t1) return m->v[VR_RAMP_SPEED];
    return m->v[VR_RAMP_SPEED] * (t - t0) / (t1 - t0);
}

const char *model_check(const Model *m) {
    return m->v[VR_RAMP_END] > m->v[VR_RAMP_START] ? 0 : "ramp_end must be after ramp_start";
}

void model_init(Model *m, double t0) { m->v[VR_SPEED] = profile(m, t0); }

void model_step(Model *m, double t, double h) { m->v[VR_SPEED] = profile(m, t + h); }
