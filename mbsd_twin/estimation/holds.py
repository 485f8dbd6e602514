"""Input reconstruction between samples.

A sampled input channel holds u_k, the value at the instant t_k = t0 + k·dt (docs/mqtt-contract.md).
The Simulator holds each input constant over one ``advance_to`` call, so the interval [t_k, t_k+1]
is driven by held values:

- ``"foh"`` (first-order hold, the default): the straight line through the two samples;
  :func:`interval_steps` reproduces it with two half steps (exact impulse and first moment).
- ``"zoh"`` (zero-order hold): u_k, for an input that really is held at each sample until the next
  (a digital controller's command written at the sample instant).

Over a block of h intervals (the twin's coarser hold levels under load) the value is the mean of
the per-interval values, which keeps the block's impulse.
"""

from __future__ import annotations

from collections.abc import Mapping

HOLDS = ("foh", "zoh")


Step = tuple[float, dict[str, float]]  # (end time [s], input port → value held until then)


def interval_steps(t0: float, t1: float, u0: Mapping[str, float], u1: Mapping[str, float],
                   holds: Mapping[str, str] | None = None) -> list[Step]:
    """The held steps that drive the model from ``t0`` to ``t1`` between two samples ``u0``, ``u1``
    (port → value; ``holds``: port → "foh" (default) or "zoh").

    First-order hold: the straight line through the samples is reproduced by two half steps with
    values ū ∓ (u1 − u0)/3 (ū the mean), which keep both the line's impulse ∫u and its first moment
    ∫u·(t − t_mid): the speeds are exact for a linear input and the positions exact to O(dt⁴).
    One constant value per interval (the mean alone) would leave a position error of
    (du/dt)·dt³/12 per interval through the inverse inertia, which accumulates while the input
    ramps. Zero-order hold: u0 over the whole interval, one step."""
    holds = holds or {}
    bad = sorted({h for h in holds.values() if h not in HOLDS})
    if bad:
        raise ValueError(f"unknown input hold {bad[0]!r}; holds: {', '.join(HOLDS)}")
    if all(holds.get(p, "foh") == "zoh" or u0.get(p, u1[p]) == u1[p] for p in u1):
        return [(t1, {p: (u0.get(p, u1[p]) if holds.get(p, "foh") == "zoh" else u1[p]) for p in u1})]
    first, second = {}, {}
    for p, b in u1.items():
        a = u0.get(p, b)
        if holds.get(p, "foh") == "zoh":
            first[p] = second[p] = a
        else:
            mean, d = 0.5 * (a + b), (b - a) / 3.0
            first[p], second[p] = mean - d, mean + d
    return [(0.5 * (t0 + t1), first), (t1, second)]


def mean_step(t0: float, steps: list[Step] | tuple[Step, ...]) -> list[Step]:
    """``steps`` from ``t0`` as one step with each input's time-weighted mean: the interval the
    filter's finite-difference Jacobians are taken over (they need the flow's sensitivity, which
    the split of the input within the interval changes by O(h²); one step halves their cost)."""
    if len(steps) == 1:
        return list(steps)
    span = steps[-1][0] - t0
    mean: dict[str, float] = {}
    t = t0
    for end, values in steps:
        for port, v in values.items():
            mean[port] = mean.get(port, 0.0) + v * (end - t) / span
        t = end
    return [(steps[-1][0], mean)]
