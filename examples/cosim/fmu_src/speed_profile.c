/* Speed set-point profile: 0 until ramp_start, a linear ramp to ramp_speed at ramp_end, then
   ramp_speed; step_speed from step_time on. No inputs; the output at the end of each step is the
   profile at t + h.

   The profile is evaluated at the time rounded to the nearest whole nanosecond (libcosim's time
   resolution): a master that accumulates t += h in doubles (1.9999999999998905 after 2000 steps of
   1e-3 instead of 2, off by far less than half a nanosecond) and libcosim (which counts
   nanoseconds) then sample the same instants, bit for bit, and the step at step_time comes at the
   same communication point in both. */
#include <math.h>

#include "model.h"

#define NS_MAX 9.0e6  /* s: beyond, a double has no nanosecond resolution (t is used as it is) */

static double on_ns_grid(double t) { return fabs(t) < NS_MAX ? nearbyint(t * 1e9) / 1e9 : t; }

static double profile(const Model *m, double at) {
    double t = on_ns_grid(at), t0 = m->v[VR_RAMP_START], t1 = m->v[VR_RAMP_END];
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
