"""What the twin found in a demo run — the opening sections of ``summary.md`` and ``findings.json``.

- **Estimates**: each augmented unknown's last published estimate ± σ (twin.csv's last row with
  both, ``est.<name>`` and ``est.<name>.sd``) against the rig's hidden truth at the end of the run
  (its manifest's ``truth``), and whether the truth lies within ±3σ; with an injected rig fault,
  first the same just before it took effect: what the twin had identified while the rig was
  healthy (a sensor fault makes the measurements disagree with the model and each other, so the
  estimates after it are no identification).
- **Alarms**: each raised alarm with its rig time, quantity, value and clear time, and its cause:
  the latest injected rig fault that took effect at most ``CAUSE_WINDOW`` s before the raise (one
  batch period after it allowed: the twin corrects at a batch's samples), else the anomaly that
  started or ended last in the ``ANOMALY_WINDOW`` s before it, else none (a false alarm).
- **Anomalies** (:mod:`.anomalies`) and where the rig's samples went.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .anomalies import CAUSE_WINDOW, Anomaly, Evidence, anomalies, sample_account

ANOMALY_WINDOW = 0.5  # s: without one, the anomaly this shortly before the raise


@dataclass(frozen=True)
class Estimate:
    name: str
    unit: str
    value: float
    sd: float
    t: float  # rig time of the estimate [s since the start]
    truth: float | None  # the rig's hidden value (None: the rig has no such quantity)
    model: float | None  # the model's value (the twin's prior)

    @property
    def inside(self) -> bool | None:
        """The truth within ±3σ of the estimate (None without a truth)."""
        return None if self.truth is None else abs(self.value - self.truth) <= 3 * self.sd


@dataclass(frozen=True)
class AlarmFinding:
    alarm: str
    t: float  # raised at [s since the start]
    quantity: str
    value: str
    cleared: float | None
    cause: str


@dataclass(frozen=True)
class Findings:
    hidden: str  # what the rig hid: its parameter mismatch and injected faults
    estimates: list[Estimate]
    before_fault: list[Estimate]  # the same just before the first injected fault took effect ([]: none)
    alarms: list[AlarmFinding]
    anomalies: list[Anomaly]
    samples: list[tuple[str, int, str]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find(ev: Evidence, augment: Sequence[str]) -> Findings:
    found = anomalies(ev)
    faults = ev.faults()
    before = estimates(ev, augment, faults[0][0]) if faults else []
    return Findings(hidden(ev), estimates(ev, augment), before, alarm_findings(ev, found), found,
                    sample_account(ev))


def estimates(ev: Evidence, augment: Sequence[str], before: float = math.inf) -> list[Estimate]:
    """The last published estimate ± σ of each augmented unknown (of a sample before rig time
    ``before`` [s since the start]), against the rig's truth."""
    tab, truth, out = ev.table, ev.manifest.get("truth", {}), []
    early = np.asarray(tab["t"]) - ev.epoch < before
    for name in augment:
        col = f"est.{name}"
        if col not in tab or f"{col}.sd" not in tab:
            continue
        v, sd = tab[col], tab[f"{col}.sd"]
        ok = np.flatnonzero(np.isfinite(v) & np.isfinite(sd) & early)
        if not len(ok):
            continue
        k = int(ok[-1])
        tr = truth.get(name, {})
        out.append(Estimate(name, tab.unit(col), float(v[k]), float(sd[k]), ev.rig(tab["t"][k]),
                            tr.get("hidden"), tr.get("model")))
    return out


def _unit(ev: Evidence, name: str) -> str:
    for col in (f"resid.{name}", f"sim.{name}", f"est.{name}", f"virt.{name}"):
        if col in ev.table:
            return ev.table.unit(col)
    return ""


def _quantity(ev: Evidence, e: Mapping[str, Any]) -> tuple[str, str]:
    """The quantity an alarm watches and its value at the raise, as text."""
    ch, unit = str(e.get("channel", "")), _unit(ev, str(e.get("channel", "")))
    if e.get("source") in ("change", "drift"):
        what = f"{e['source']} test on {e.get('kind', 'channel')} {ch}" + \
               (" (the filter diverged)" if e.get("divergence") else "")
        onset = f", estimated onset {ev.rig(e['onset']):.3f} s" if "onset" in e else ""
        return what, f"size {float(e.get('size', math.nan)):+.4g} {unit}{onset}".replace("  ", " ")
    return f"{e.get('source')} {ch}", f"{float(e.get('value', math.nan)):+.4g} {unit} (threshold " \
                                      f"{e.get('threshold')} {unit})".replace("  ", " ")


def _cause(ev: Evidence, t: float, found: Sequence[Anomaly]) -> str:
    faults = [(te, spec) for te, spec in ev.faults() if te <= t + ev.batch_period and t - te <= CAUSE_WINDOW]
    if faults:
        te, spec = faults[-1]
        return f"injected {spec} (took effect at {te:.3f} s; raised {t - te:.3f} s later)"
    near = [(edge, a) for a in found if a.kind != "spike" for edge in {a.t0, a.t1}
            if t - ANOMALY_WINDOW <= edge <= t + 1e-9]
    if near:
        edge, a = max(near, key=lambda x: x[0])
        side = "start" if edge == a.t0 and a.t1 > a.t0 else "end" if a.t1 > a.t0 else ""
        return f"no injected fault: it follows the {side + ' of the ' if side else ''}{a.label} at {edge:.3f} s " \
               f"({a.what})"
    return "no injected fault and no anomaly before it: a false alarm"


def alarm_findings(ev: Evidence, found: Sequence[Anomaly]) -> list[AlarmFinding]:
    events = ev.events.get("alarms", [])
    out = []
    for i, e in enumerate(events):
        if e.get("event") != "raised":
            continue
        clear = next((c for c in events[i + 1:] if c.get("alarm") == e["alarm"] and c.get("event") == "cleared"),
                     None)
        t = ev.rig(e["t"])
        quantity, value = _quantity(ev, e)
        out.append(AlarmFinding(str(e["alarm"]), t, quantity, value, None if clear is None else ev.rig(clear["t"]),
                                _cause(ev, t, found)))
    return out


def decimals(sd: float) -> int:
    """Decimals that show σ with two significant digits."""
    return max(0, 1 - math.floor(math.log10(sd))) if sd > 0 and math.isfinite(sd) else 4


def _estimate_row(e: Estimate) -> str:
    d = decimals(e.sd)
    unit = f" [{e.unit}]" if e.unit else ""
    if e.truth is None:
        return f"| {e.name}{unit} | {e.value:.{d}f} ± {e.sd:.{d}f} | n/a | n/a | n/a |"
    err = e.value - e.truth
    z = f" ({err / e.sd:+.1f} σ)" if e.sd > 0 else ""
    model = "" if e.model is None else f" (model {e.model:g})"
    return (f"| {e.name}{unit} | {e.value:.{d}f} ± {e.sd:.{d}f} | {e.truth:g}{model} | "
            f"{err:+.{d}f}{z} | {'yes' if e.inside else '**no**'} |")


def hidden(ev: Evidence) -> str:
    mismatch = ev.manifest.get("mismatch") or {}
    parts = [f"{k} = {v:g}" for k, v in mismatch.items()]
    faults = [f"{spec} (at {te:.3f} s)" for te, spec in ev.faults()]
    return ("The rig hides " + (", ".join(parts) if parts else "no parameter mismatch") + "; injected faults: "
            + (", ".join(faults) if faults else "none") + ".")


def found_markdown(f: Findings) -> list[str]:
    """The "What the twin found" section."""
    lines = ["## What the twin found", "", f.hidden, ""]
    if f.before_fault:
        t = max(e.t for e in f.before_fault)
        lines += [f"Identified while the rig was healthy: the estimates at {t:.3f} s, just before the first injected "
                  "fault took effect:", "",
                  "| identified before the fault | estimate ± σ | hidden truth | error | truth within ±3σ |",
                  "|---|---|---|---|---|", *map(_estimate_row, f.before_fault), "",
                  "After a sensor fault the measurements disagree with the model and with each other: the "
                  "twin alarms and re-initialises, and its estimates then are no identification.", ""]
    if f.estimates:
        t = max(e.t for e in f.estimates)
        lines += [f"Estimates at the end of the run ({t:.2f} s):", "",
                  "| estimated parameter | estimate ± σ | hidden truth | error | truth within ±3σ |",
                  "|---|---|---|---|---|", *map(_estimate_row, f.estimates), ""]
    else:
        lines += ["The twin published no estimate.", ""]
    if f.alarms:
        lines += ["| alarm | raised at [s] | quantity | value at the raise | cleared at [s] | cause |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {a.alarm} | {a.t:.3f} | {a.quantity} | {a.value} | "
                  f"{'-' if a.cleared is None else f'{a.cleared:.3f}'} | {a.cause} |" for a in f.alarms]
    else:
        lines.append("No alarm was raised.")
    return [*lines, ""]


def anomalies_markdown(f: Findings) -> list[str]:
    """The "Anomalies" section: every anomaly explained, and where the rig's samples went."""
    lines = ["## Anomalies", "",
             "From the twin's own messages (residual messages: output sequence, hold changes, re-initialisations; "
             "its health counters, read as each residual message was published); rig time since the stream's "
             "start. Shaded or marked on residuals.png.", ""]
    if f.anomalies:
        lines += ["| # | anomaly | rig time [s] | what the twin reports | why |", "|---|---|---|---|---|"]
        lines += [f"| {i} | {a.label} | {a.t0:.3f}" + (f"–{a.t1:.3f}" if a.t1 > a.t0 else "") +
                  f" | {a.what} | {a.why} |" for i, a in enumerate(f.anomalies, 1)]
    else:
        lines.append("None.")
    lines += ["", "| rig samples | count | from |", "|---|---|---|"]
    lines += [f"| {what} | {n} | {src} |" for what, n, src in f.samples]
    return [*lines, ""]
