"""Assertions shared by the engine tests: named columns against closed-form expectations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

ANGLE_COLUMNS = (".theta",)


class HasColumns(Protocol):
    def __getitem__(self, name: str) -> np.ndarray: ...


def assert_columns(res: HasColumns, expected: Mapping[str, ArrayLike], rtol: float = 1e-9,
                   atol_frac: float = 1e-9, floor: float = 1.0, wrap_angles: bool = False) -> None:
    """Every ``expected`` column matches ``res[column]`` to ``rtol`` plus an absolute tolerance of
    ``atol_frac × max(max|expected|, floor)`` (signals that are identically zero get ``floor``).

    With ``wrap_angles`` the ``.theta`` columns are compared on the circle (mod 2π). All mismatching
    columns are reported together, with the worst time index, expected and got values."""
    failures = []
    for name, exp in expected.items():
        exp = np.asarray(exp, dtype=float)
        got = np.asarray(res[name], dtype=float)
        scale = max(float(np.max(np.abs(exp), initial=0.0)), floor)
        diff = got - exp
        if wrap_angles and name.endswith(ANGLE_COLUMNS):
            diff = np.angle(np.exp(1j * diff))
        bad = np.abs(diff) > rtol * np.abs(exp) + atol_frac * scale
        if np.any(bad):
            k = int(np.argmax(np.abs(diff)))
            failures.append(f"{name}: {int(bad.sum())}/{bad.size} points off; worst at index {k}: "
                            f"expected {exp[k]:.12g}, got {got[k]:.12g} (diff {diff[k]:.3g}, "
                            f"signal scale {scale:.3g})")
    assert not failures, "engine differs from the closed form:\n  " + "\n  ".join(failures)
