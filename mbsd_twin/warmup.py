"""Fill numba's disk cache with the engine's and the estimator's compiled kernels, so that the first
Simulator, FMU instance or twin starts in about a second: ``python -c "from mbsd_twin.warmup import
warm; warm()"`` (``make`` runs it after installing, the container image at build time)."""

from __future__ import annotations

import time

from .estimation.warm import load_kernels
from .model.loader import bundled_slider_crank, load_mechanism
from .simulation.simulator import Simulator


def warm() -> float:
    """Compile the compiled path's kernels into numba's disk cache (on a fresh install, about half
    a minute for the engine and a minute for the estimator on a 2-core machine; afterwards loading
    takes about a second) by stepping the bundled slider crank. Returns the wall time [s]. Run by
    ``make`` after installing, and by the test session before any test starts a process of its own."""
    t0 = time.perf_counter()
    mech = load_mechanism(bundled_slider_crank())
    sim = Simulator(mech)
    sim.set_input("motor_torque", 1.0)
    sim.advance_to(0.0105)
    sim.outputs()
    sim.set_configuration({"crank.theta": 0.1}, {"crank.omega": 1.0})  # nb_config, as the twin's filter uses
    load_kernels()  # the filter's kernels (nb_filter, nb_kalman)
    return time.perf_counter() - t0


def kernels_to_compile() -> list[str]:
    """What building a twin would compile (not in numba's disk cache): "the engine's kernels",
    "the state estimator's kernels" ([]: everything loads from the cache)."""
    from .compiled import nb_stepper
    from .compiled.nb_cache import cached
    from .estimation import nb_filter, nb_kalman

    need = []
    if not cached(nb_stepper.advance):
        need.append("the engine's kernels")
    if not (cached(nb_filter.linearise) and cached(nb_kalman.update)):
        need.append("the state estimator's kernels")
    return need
