"""State and parameter estimation on the engine: input reconstruction between samples, the
extended Kalman filter on a mechanism's independent coordinates, sequential change detection and
offline calibration (docs/twin-estimation.md). Engine layer: imports the Simulator, never a face."""

from .calibrate import Calibration, calibrate
from .change import ChangeDetector, Cusum, threshold
from .ekf import Augment, FilterConfig, Innovation, StateEstimator
from .holds import HOLDS, interval_steps
from .records import GapNoise

__all__ = ["HOLDS", "Augment", "Calibration", "ChangeDetector", "Cusum", "FilterConfig", "GapNoise", "Innovation",
           "StateEstimator", "calibrate", "interval_steps", "threshold"]
