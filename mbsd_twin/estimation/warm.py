"""Load the state estimator's compiled kernels (``nb_filter``, ``nb_kalman``, ``nb_batch``) before a stream starts:
the twin calls :func:`load_kernels` when it builds its filter, so the first samples of a stream do not
pay for it (about 0.3 s from the cache; minutes on a fresh install, announced by the engine)."""

from __future__ import annotations

import numpy as np

from ..compiled.nb_cache import compile_notice
from ..model.loader import bundled_slider_crank, load_mechanism
from ..simulation.simulator import Simulator
from . import batch
from .ekf import Augment, FilterConfig
from .ekf import StateEstimator as Estimator

_LOADED = False


def load_kernels() -> None:
    """Load the kernels from numba's cache (compiling them on a fresh install) once per process, by
    two samples of a throwaway filter on the bundled slider crank: about 0.3 s that would otherwise
    fall on the first sample of a stream (a twin would start with a backlog of batches)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    est = Estimator(Simulator(load_mechanism(bundled_slider_crank())), FilterConfig(
        ("crank.theta",), {"crank.theta": 1e-3, "crank.omega": 0.01},
        augment=(Augment("piston.mass", 0.1), Augment("motor_torque.bias", 0.1))))
    with compile_notice("the state estimator's kernels"):
        est.initialize(0.0, {}, {}, {"motor_torque": 1.0})
        for k in (1, 2):
            est.sample([(k * 1e-3, {"motor_torque": 1.0})], {"motor_torque": 1.0}, {"crank.theta": 0.0})
        one = np.ones(1)  # and a twin's run of samples in one call (nb_batch), as the twin calls it
        inp = batch.Inputs(np.ones((2, 1)), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.bool_),
                           np.ones(1, dtype=np.bool_), 2e-3, one, np.array([3e-3, 4e-3]), 0.0)
        batch.run(est, inp, np.zeros((2, len(est.meas))), 0, [{"motor_torque": 1.0}] * 2,
                  batch.mirror([None, None], None, 0.02, (0.5, 5.0), 2, [], [0.0, 0.0], 500, 1e3, 2))
