"""Step-size error norms for the explicit Runge–Kutta methods.

The step-size control compares each component's local error estimate e_i with its scale
sc_i = atol + rtol·max(|y_i(t)|, |y_i(t+h)|) and accepts the step when a norm of e/sc is at most 1:

- ``"max"`` (default): the largest |e_i / sc_i|, as MATLAB's ode45 does. Every coordinate and
  velocity is held to rtol on its own.
- ``"rms"``: the root mean square of e/sc over the components, scipy's (and Hairer's) choice. A
  mechanism state has many components (x, y, θ and their rates per body) that barely move, so one
  component may then be off by up to √n times the tolerance: on the slider crank at rtol 1e-8 the
  crank angle ends 2e-6 rad off after 10 s, against 2.0e-7 rad with the max norm.

For DOP853 the per-component estimate is scipy's: h·e5·|e5| / √(e5² + 0.01·e3²) from the embedded
5th- and 3rd-order pairs, so the two norms share every other detail. The compiled stepper
(``nb_dop853._error_norm``) implements both; for the numpy path, ``explicit_method`` returns
scipy's class or a subclass of it with the max norm. Radau, BDF and LSODA keep scipy's own norms.
Which of the energy integrals the norm covers: :func:`controlled_integrals`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.integrate as si

ERROR_NORMS = ("max", "rms")
EXPLICIT = {"RK45": si.RK45, "RK23": si.RK23, "DOP853": si.DOP853}  # scipy's explicit Runge–Kutta classes


def _max_norm(self: Any, K: Any, h: float, scale: Any) -> float:
    """The step is accepted on the largest scaled error (scipy's per-component estimate)."""
    return float(np.max(np.abs(self._estimate_error(K, h) / scale)))


_MAX = {name: type(f"{name}MaxNorm", (cls,), {"_estimate_error_norm": _max_norm}) for name, cls in EXPLICIT.items()}


def explicit_method(name: str, norm: str) -> Any:
    """The scipy solver class for explicit method ``name`` with error norm ``norm``."""
    return (_MAX if norm == "max" else EXPLICIT)[name]


def controlled_integrals(system: Any, opts: Any) -> int:
    """How many of the energy integrals (dissipated energy, input work, constraint work: the last
    three state components) the step-size control covers for ``system`` (a ``System``) under
    ``opts`` (``SolverOptions``): all three with ``energy_error_control``; else the dissipated
    energy alone for a mechanism with penalty contact, whose dissipated power kinks where a probe
    touches down or lifts off (δ = 0, or Fn clamped at 0) while positions and velocities stay
    smooth enough there for the control not to see it (uncontrolled, the integral was off by
    1.6e-5 of a damped ball's impact loss, and the octagonal terrain wheel's energy balance by
    1.4e-6 of its peak energy; controlled, for 0.5–1.5 % more steps: see docs/simulator.md); else
    none (both paths, the numpy one by an infinite atol)."""
    if opts.energy_error_control:
        return 3
    return 1 if any(ld.type == "contact" for ld in system.mechanism.loads) else 0
