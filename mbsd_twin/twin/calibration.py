"""Twin recordings as calibration data (``mbsd-twin twin calibrate``); synthetic recordings of the
rig for tests and benchmarks are :func:`mbsd_twin.rig.recording.write_rig_recording`.

A recording's ``in`` records hold the sensor messages the twin processed; their samples are
ordered by (rig session, seq), duplicates dropped, and mapped through the recorded core
configuration: ``inputs`` (channel → input port) and ``compare`` (channel → model output). Times
are counted from the first sample. The fit itself is :func:`mbsd_twin.estimation.calibrate`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..estimation.calibrate import Calibration, calibrate
from ..model.loader import loads_mechanism
from ..model.model import Mechanism
from .config.sections import CoreConfig
from .protocol import Invalid, SensorBatch, parse_sensor
from .recorder import FORMAT, numbered_records


@dataclass(frozen=True)
class RecordingData:
    path: str
    core: CoreConfig
    mechanism: Mechanism
    mechanism_text: str
    t_origin: float  # rig time of the first sample
    times: NDArray[np.float64]  # s from the first sample
    channels: dict[str, NDArray[np.float64]]
    batches: int
    duplicates: int
    torn: tuple[str, ...] = ()  # "file: line n" of unreadable lines (torn by a disk error or a crash), skipped
    gaps: int = 0  # gap records: the recording was suspended, ``lost`` records missing


def _records(path: str) -> tuple[list[tuple[str, int, dict[str, Any]]], list[str]]:
    """(file, line number, record) of every readable record in every segment, and where the
    unreadable lines are (torn by a failed write or a crash: their batches are missing, like lost ones)."""
    out, torn = [], []
    for seg, n, rec in numbered_records(path):
        if rec is None:
            torn.append(f"{seg}: line {n}")
        else:
            out.append((seg, n, rec))
    return out, torn


def _header(path: str, recs: list[tuple[str, int, dict[str, Any]]]) -> tuple[CoreConfig, Mechanism, str]:
    if not recs or recs[0][2].get("k") != "header":
        raise ValueError(f"{path}: line 1: the recording does not start with a header record")
    seg, n, h = recs[0]
    if h.get("format") != FORMAT:
        raise ValueError(f"{seg}: line {n}: format {h.get('format')!r}, expected {FORMAT}")
    try:
        core = CoreConfig.from_dict(h["core"])
        text = str(h["mechanism_toml"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{seg}: line {n}: incomplete header ({exc})") from exc
    return core, loads_mechanism(text, source=f"{path} (recorded {h.get('mechanism', 'mechanism')})"), text


def read_recording(path: str, channels: Sequence[str] = ()) -> RecordingData:
    """The samples of a recording: the core's input channels and the compared ``channels``
    (default: all of the core's ``compare``); batches lacking one of them are left out."""
    recs, torn = _records(path)
    core, mech, text = _header(path, recs)
    for c in channels:
        if c not in core.compare:
            raise ValueError(f"{path}: channel {c!r} is not compared with a model output; channels: "
                             f"{', '.join(core.compare)}")
    session, seen, dups = 0, {}, 0
    gaps = sum(rec.get("k") == "gap" for _, _, rec in recs)
    for seg, n, rec in recs[1:]:
        if rec.get("k") == "restart":
            session += 1
        if rec.get("k") != "in":
            continue
        batch = parse_sensor(str(rec.get("p", "")).encode(), core.asset, 1 << 30)
        if isinstance(batch, Invalid):
            raise ValueError(f"{seg}: line {n}: unreadable sensor message ({batch.reason}: {batch.detail})")
        dups += (session, batch.seq) in seen
        seen[(session, batch.seq)] = batch
    need = [*core.inputs, *(channels or core.compare)]
    batches: list[SensorBatch] = [seen[k] for k in sorted(seen) if all(c in seen[k].ch for c in need)]
    if not batches:
        raise ValueError(f"{path}: no sensor batch holds the channels {', '.join(need)}")
    t = np.concatenate([b.t0 + b.dt * np.arange(b.n) for b in batches])
    data = {c: np.concatenate([b.ch[c] for b in batches]) for c in need}
    return RecordingData(path, core, mech, text, float(t[0]), t - t[0], data, len(batches), dups, tuple(torn), gaps)


def calibrate_recording(path: str, params: Sequence[str], *, channels: Sequence[str] = (),
                        noise: Mapping[str, float] | None = None, t_start: float = 0.0,
                        t_end: float = float("inf"), **kw: Any) -> tuple[Calibration, RecordingData]:
    """Fit ``params`` to a recording. ``channels``: compared channels to fit (default: all of the
    core's ``compare``); ``noise``: σ per channel; ``t_start``/``t_end``: window in s from the first
    sample; other keywords go to :func:`~mbsd_twin.estimation.calibrate`."""
    rec = read_recording(path, channels)
    core = rec.core
    chans = list(channels) or list(core.compare)
    for c in noise or {}:
        if c not in chans:
            raise ValueError(f"{path}: --noise for {c!r}, which is not fitted; fitted channels: {', '.join(chans)}")
    keep = (rec.times >= t_start) & (rec.times <= t_end)
    if keep.sum() < 3:
        raise ValueError(f"{path}: fewer than 3 samples between {t_start} s and {t_end} s "
                         f"(the recording spans 0 to {rec.times[-1]:.3f} s)")
    inputs = {port: rec.channels[c][keep] for c, port in core.inputs.items()}
    measured = {core.compare[c]: rec.channels[c][keep] for c in chans}
    sigma = {core.compare[c]: s for c, s in (noise or {}).items()}
    cal = calibrate(rec.mechanism, params, rec.times[keep], inputs, measured, noise=sigma, **kw)
    return cal, rec


def calibration_header(cal: Calibration, recording: str) -> str:
    """The comment lines on top of a calibrated mechanism file: source, time, values, σ."""
    when = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    values = "".join(f"  {n} = {float(v)!r} ± {e:.3g} (1 σ; was {float(s)!r})\n"
                     for n, s, v, e in zip(cal.names, cal.start, cal.values, cal.stderr, strict=True))
    noise = ", ".join(f"{o} {sd:.3g} ({cal.sigma_source[o]})" for o, sd in cal.sigma.items())
    return f"Calibrated by `mbsd-twin twin calibrate` from {recording} at {when}:\n{values}  noise σ: {noise}"
