"""State and parameter estimation on the engine: input reconstruction between samples, the
extended Kalman filter on a mechanism's independent coordinates, sequential change detection and
offline calibration (docs/twin-estimation.md). Engine layer: imports the Simulator, never a face."""

from .holds import HOLDS, interval_inputs

__all__ = ["HOLDS", "interval_inputs"]
