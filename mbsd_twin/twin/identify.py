"""``mbsd-twin twin identify``: the identifiability check of a twin configuration's augmentation
(:mod:`mbsd_twin.estimation.identifiability`) over a representative healthy motion.

The motion is the synthetic rig's (:mod:`mbsd_twin.rig.synthetic`) with the model's own parameters: by default the
rig ``mbsd-twin rig`` runs for the twin's channels — its speed controller on the output of the
``resync_speed`` channel (10 ± 2 rad/s at 0.5 Hz) driving the port of the first mapped input —
or a rig file's (``--rig``). The filter is the twin's own (:class:`.tracking.EkfTracker`): its
measured outputs and σ (``[core] noise``), its input holds and its augmented unknowns.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ..estimation.ekf import StateEstimator, speed_of
from ..estimation.holds import interval_steps
from ..estimation.identifiability import AugmentCheck, Identifiability, Motion, Segment, analyse, check
from ..estimation.isolation import Sample
from ..model.model import Mechanism
from ..rig.synthetic import RigConfig, Trajectory
from .config.sections import CoreConfig
from .tracking import EkfTracker

DURATION = 2.0  # s: one period of the default rig's 0.5 Hz speed modulation
SEGMENT = 0.1  # s: each segment's initial state is a nuisance (the filter's state memory; module doc)


@dataclass(frozen=True)
class Report:
    """The check of one configuration: every candidate, the augmented unknowns' checks, the motion."""

    ident: Identifiability
    augmented: tuple[AugmentCheck, ...]
    motion: str  # how the motion was made, for the reader
    measured: dict[str, float]  # measured output → σ


def default_rig(cfg: CoreConfig, mech: Mechanism) -> RigConfig:
    """The rig ``mbsd-twin rig`` would run for this twin: its channels, the first mapped input as
    the drive, a speed controller on the ``resync_speed`` channel's output, friction feed-forward
    from ``main_bearing`` where the mechanism has it; the model's own parameters, no noise."""
    drive = next(iter(cfg.inputs.values()), "")
    speed = cfg.compare.get(cfg.resync_speed, "")
    joints = {j.name for j in mech.joints}
    return RigConfig(asset=cfg.asset, channels={**cfg.compare, **cfg.inputs}, mismatch={}, noise={}, drive=drive,
                     drive_speed=speed if drive else "", friction_joint="main_bearing" if "main_bearing" in joints
                     else "")


def motion(est: StateEstimator, cfg: CoreConfig, mech: Mechanism, rig: RigConfig, duration: float,
           segment: float = SEGMENT) -> Motion:
    """``duration`` s of the rig's noise-free motion (no mismatch, no fault) as the filter's
    window, cut into segments of ``segment`` s: each starts the Simulator at the rig's state there
    and holds the later samples' inputs and measured outputs."""
    rig = dataclasses.replace(rig, mismatch={}, faults=(), noise={})
    if rig.drive and rig.drive not in cfg.inputs.values():
        raise ValueError(f"the rig drives input port {rig.drive!r}, which [core] inputs does not map "
                         f"({cfg.inputs or 'none'}): the twin's model would not see it")
    n = max(2, round(duration * rig.rate) + 1)
    truth = Trajectory(mech, rig).truth(0, n)
    ports = {}
    for ch, port in cfg.inputs.items():
        if port not in truth and ch not in truth:
            raise ValueError(f"[core] inputs {ch} = {port!r}: the rig neither drives that port nor publishes "
                             f"channel {ch!r}")
        ports[port] = truth[port] if port in truth else truth[ch]
    holds = {port: cfg.input_hold.get(ch, "foh") for ch, port in cfg.inputs.items()}
    u = [{p: float(v[k]) for p, v in ports.items()} for k in range(n)]
    t = truth["t"]
    per = max(1, round(segment * rig.rate))
    segs = []
    for k0 in range(0, n - 1, per):
        est.initialize(float(t[k0]), {c: float(truth[c][k0]) for c in est.coords},
                       {speed_of(c): float(truth[speed_of(c)][k0]) for c in est.coords}, u[k0], reset_unknowns=True)
        segs.append(Segment(est.sim.snapshot(), tuple(
            Sample(float(t[k]), interval_steps(float(t[k - 1]), float(t[k]), u[k - 1], u[k], holds), u[k],
                   {m: float(truth[m][k]) for m in est.meas}) for k in range(k0 + 1, min(k0 + per, n - 1) + 1))))
    return Motion(tuple(segs), {port: float(est.x[i]) for port, i in est.bias.items()})


def identify(cfg: CoreConfig, mech: Mechanism, rig: RigConfig | None = None, duration: float = DURATION,
             rig_name: str = "", segment: float = SEGMENT) -> Report:
    """The identifiability check of ``cfg``'s augmentation over ``duration`` s of the rig's motion
    (``rig`` None: :func:`default_rig`). ValueError naming the key for a configuration the model
    cannot serve."""
    for key, v in (("duration", duration), ("segment", segment)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"--{key} must be a positive number of seconds, got {v!r}")
    try:
        est = EkfTracker(cfg, mech).est
    except ValueError as exc:
        raise ValueError(f"[core] augment / noise / compare: {exc}") from None
    chosen = rig or default_rig(cfg, mech)
    mot = motion(est, cfg, mech, chosen, duration, segment)
    ident = analyse(est, mot)
    aug = {a.name: a.sigma for a in cfg.augment}
    how = rig_name or (f"the default rig: speed controller on {chosen.drive_speed} driving {chosen.drive}"
                       if chosen.drive_speed else f"the default rig: open-loop {chosen.drive or 'no drive'}")
    return Report(ident, tuple(check(ident, aug)), f"{mot.duration:.3g} s of {how} in {segment:g} s segments",
                  dict(zip(est.meas, est.r.tolist(), strict=True)))


def _num(x: float, fmt: str = ".3g") -> str:
    return "—" if not math.isfinite(x) else format(x, fmt)


def format_report(rep: Report) -> str:
    """The readable tables: every candidate, then the augmented unknowns and confusable pairs."""
    ident, aug = rep.ident, {a.name for a in rep.augmented}
    head = (f"identifiability over {rep.motion} ({ident.samples} samples; measured "
            + ", ".join(f"{m} σ {s:g}" for m, s in rep.measured.items()) + ")")
    rows = [("name", "unit", "value", "CRLB σ", "rel. σ", "augmented", "most correlated (ρ)")]
    for u in ident.unknowns:
        other, rho = ident.partner(u.name)
        rows.append((u.name, u.unit, _num(u.value, ".4g"), _num(u.sd), _num(u.rel_sd, ".2%"),
                     "yes" if u.name in aug else "", f"{other} ({rho:+.3f})" if other else "—"))
    width = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [head, ""] + ["  ".join(c.ljust(w) for c, w in zip(r, width, strict=True)).rstrip() for r in rows]
    lines += ["", "augmented unknowns (σ jointly with each other; identifiable: σ ≤ 0.1 × prior σ):"]
    for a in rep.augmented:
        verdict = "identifiable" if a.identifiable else "NOT identifiable"
        lines.append(f"  {a.name} [{a.unit}]: σ {_num(a.sd)} against prior σ {a.prior_sd:g}: {verdict}")
        for x in a.nearest:
            mark = "  CONFUSABLE" if x in a.confusable else ""
            lines.append(f"    absorbs {x.name}: ρ {x.correlation:+.3f}, moves {x.gain:+.3g} per unit of it, "
                         f"{x.share:.0%} of its signature{mark}")
    pairs = ident.confusable()
    lines += ["", f"confusable pairs (|ρ| ≥ {ident.threshold}): "
              + ("; ".join(f"{a} ~ {b} ({r:+.3f})" for a, b, r in pairs) if pairs else "none")]
    return "\n".join(lines)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def report_json(rep: Report) -> dict[str, Any]:
    """The report as JSON-ready data (a σ that is infinite or undefined is null)."""
    ident = rep.ident
    rho = ident.correlation
    return {
        "motion": rep.motion, "samples": ident.samples, "duration": ident.duration, "threshold": ident.threshold,
        "measured": rep.measured,
        "unknowns": [{"name": u.name, "kind": u.kind, "unit": u.unit, "value": u.value, "sd": _finite(u.sd),
                      "rel_sd": _finite(u.rel_sd), "augmented": any(a.name == u.name for a in rep.augmented),
                      "partner": ident.partner(u.name)[0], "partner_correlation": ident.partner(u.name)[1]}
                     for u in ident.unknowns],
        "correlation": {"names": [u.name for u in ident.unknowns], "matrix": rho.round(6).tolist()},
        "confusable": [list(p) for p in ident.confusable()],
        "augmented": [{"name": a.name, "unit": a.unit, "value": a.value, "prior_sd": a.prior_sd,
                       "sd": _finite(a.sd), "identifiable": a.identifiable,
                       "absorbs": [dataclasses.asdict(x) | {"confusable": x in a.confusable} for x in a.nearest],
                       "confusable": [x.name for x in a.confusable]} for a in rep.augmented],
    }
