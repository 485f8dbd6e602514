"""What the dashboard computes on the server about the estimator's outputs: units of every column,
the χ² band of the mean NIS over the visible window, and the CUSUM threshold.

NIS (normalised innovation squared) of one sample is χ² with ``dof`` degrees of freedom (the
measured channels) when the filter is consistent; the mean of ``n`` independent samples is then
χ²(n·dof)/n, whose central 95 % interval is the band sent to the page.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any

from ..model.model import Mechanism

SUFFIXES = (".sd", ".estimate_sd", ".estimate", ".bias")  # derived quantities keep the base unit


def base_units(mech: Mechanism, compare: dict[str, str]) -> dict[str, str]:
    """Units of model outputs, inputs, parameters and compared channels (by name)."""
    from ..physics.system import compile_mechanism
    from ..simulation.ports import input_ports, model_parameters, output_specs

    units: dict[str, str] = {}
    with contextlib.suppress(Exception):  # units are decoration; the page works without them
        units.update({s.name: s.unit for s in output_specs(compile_mechanism(mech))})
    units.update({p.name: p.unit for p in input_ports(mech)})
    units.update({name: p.unit for name, (p, _) in model_parameters(mech).items()})
    units.update({ch: units[port] for ch, port in compare.items() if port in units})
    return units


def unit_of(name: str, units: dict[str, str]) -> str:
    """Unit of a channel, output, input, parameter or estimate (``nis`` 1, ``cusum.*`` σ;
    ``x.sd``, ``x.bias``, ``x.estimate``, ``x.estimate_sd`` the unit of ``x``); '' when unknown."""
    if name == "nis":
        return "1"
    if name.startswith("cusum."):
        return "σ"
    while name not in units:
        stem = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), None)
        if stem is None:
            return ""
        name = stem
    return units[name]


def channel_units(channels: Sequence[str], units: dict[str, str]) -> dict[str, str]:
    """Units of history channels ``<topic>.<name>`` (``state.theta``, ``estimates.piston.mass``)."""
    return {c: unit_of(c.partition(".")[2], units) for c in channels}


def twin_units(config: str) -> dict[str, str]:
    """:func:`base_units` of the twin that the TOML file ``config`` configures (its mechanism, its
    compared channels)."""
    from ..model.loader import bundled_slider_crank, load_mechanism
    from ..twin.config.file import load_config

    cfg = load_config(config)
    return base_units(load_mechanism(cfg.service.mechanism or bundled_slider_crank()), dict(cfg.core.compare))


def column_unit(column: str, units: dict[str, str]) -> str:
    """Unit of a store column (``t``, ``sim.<ch>``, ``resid.<ch>``, ``meas.<ch>``, ``virt.<o>``, ``est.<e>``)."""
    if column == "t":
        return "s"
    return unit_of(column.partition(".")[2], units)


def measured_channels(core: Any) -> list[str]:
    """The channels the filter corrects with (compared and given a noise σ): NIS degrees of freedom."""
    return [ch for ch in core.compare if ch in core.noise]


def nis_band(values: Sequence[float], dof: int, level: float = 0.95) -> dict[str, Any]:
    """Mean of the finite NIS ``values`` and the central ``level`` interval of that mean for a
    consistent filter: χ²(n·dof)/n quantiles (scipy.stats.chi2); ``sample_q999``: the 99.9 % point
    of one sample's χ²(dof) (the page cuts its NIS axis there); ``max``: the largest value."""
    from scipy.stats import chi2

    finite = [v for v in values if math.isfinite(v)]
    n = len(finite)
    out: dict[str, Any] = {"n": n, "dof": dof, "level": level, "mean": None, "band": None, "max": None,
                           "sample_q999": float(chi2.ppf(0.999, dof)) if dof > 0 else None}
    if n and dof > 0:
        tail = 0.5 * (1.0 - level)
        lo, hi = chi2.ppf([tail, 1.0 - tail], n * dof) / n
        out.update(mean=sum(finite) / n, band=[float(lo), float(hi)], max=max(finite))
    return out


def cusum_threshold(core: Any, sample_dt: float | None) -> float | None:
    """The change tests' alarm threshold h [σ] at the twin's sample rate (as the twin computes it)."""
    from ..estimation.change import threshold

    if not sample_dt or sample_dt <= 0:
        return None
    return threshold(core.change_mtbfa, 1.0 / sample_dt, core.change_shift)
