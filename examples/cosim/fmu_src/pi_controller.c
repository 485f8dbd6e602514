/* PI speed controller: a digital controller sampled at the communication step.

   At each fmi2DoStep(t, h) it takes the speed error e = speed_setpoint - speed of its inputs (held
   over the step), integrates it over the step (I += e*h) and sets its output for the end of the
   step to u = kp*e + ki*I, limited to [-torque_max, torque_max]. Anti-windup by clamping: while
   the command is limited and the error drives it further into the limit, the integral is held.
   The output is 0 until the first step and never depends on the inputs of the same instant (no
   direct feedthrough, so a loop through it has no algebraic loop). state[0]: I [rad]. */
#include "model.h"

const char *model_check(const Model *m) {
    if (!(m->v[VR_KP] >= 0.0) || !(m->v[VR_KI] >= 0.0)) return "kp and ki must be >= 0";
    if (!(m->v[VR_TORQUE_MAX] > 0.0)) return "torque_max must be > 0";
    return 0;
}

void model_init(Model *m, double t0) {
    (void)t0;
    m->state[0] = 0.0;
    m->v[VR_TORQUE] = 0.0;
}

void model_step(Model *m, double t, double h) {
    (void)t;
    double e = m->v[VR_SPEED_SETPOINT] - m->v[VR_SPEED], limit = m->v[VR_TORQUE_MAX];
    double integral = m->state[0] + e * h;
    double u = m->v[VR_KP] * e + m->v[VR_KI] * integral;
    if (u > limit || u < -limit) {
        u = u > 0.0 ? limit : -limit;
        if (e * u > 0.0) integral = m->state[0];
    }
    m->state[0] = integral;
    m->v[VR_TORQUE] = u;
}
