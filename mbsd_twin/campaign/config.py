"""Campaign files (TOML): typed, frozen job descriptions; every error names the file, job and key.

    name = "study"                      # optional; default: the file's stem
    [[jobs]]
    kind = "sweep"                      # sweep | fmu_vs_native | calibrate
    name = "stiffness"                  # unique; default "<kind>-<index>"
    ...

Relative paths (mechanisms, recordings) are relative to the campaign file's folder.
"""

from __future__ import annotations

import glob
import math
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CampaignError
from ..twin.config.paths import resolve_path

STATISTICS = ("min", "max", "mean", "rms", "final", "period")


@dataclass(frozen=True)
class SweepJob:
    """Runs of one mechanism over the Cartesian product of ``grid`` (parameter or input port →
    values); each grid point is one task. ``fixed``: parameters/inputs set in every run."""

    name: str
    mechanism: Path
    grid: dict[str, tuple[float, ...]]
    duration: float
    outputs: tuple[str, ...]
    output_interval: float = 0.001  # s between recorded output samples
    statistics: tuple[str, ...] = STATISTICS  # of each output over the run
    fixed: dict[str, float] = field(default_factory=dict)
    kind: str = "sweep"


@dataclass(frozen=True)
class FmuJob:
    """Build the FMU of ``mechanism`` once, run it in fmpy and natively, compare every output
    (band: rtol · max|native| + atol, :func:`mbsd_twin.fmi.validation.validate`)."""

    name: str
    mechanism: Path
    stop_time: float = 1.0  # s
    step: float = 0.001  # s, communication step
    inputs: dict[str, str] = field(default_factory=dict)  # port → profile text (fmu validate --input)
    parameters: dict[str, float] = field(default_factory=dict)
    rtol: float = 1e-9
    atol: float = 1e-12
    fmi_version: str = "2"  # "2" or "3"
    checks: bool = False  # fmpy validate + fmutool -check as well (slow)
    kind: str = "fmu_vs_native"


@dataclass(frozen=True)
class CalibrateJob:
    """Offline calibration of ``params`` on each recording (one task per recording, through
    :func:`mbsd_twin.twin.calibration.calibrate_recording`); passes when every fit converged and,
    if ``expected`` is given, each estimate is within ``rtol`` of it."""

    name: str
    recordings: tuple[Path, ...]
    params: tuple[str, ...]
    channels: tuple[str, ...] = ()  # default: every compared channel
    segment: float = 0.5  # s, shooting segment
    stride: int = 5
    hold: str = "foh"
    expected: dict[str, float] = field(default_factory=dict)
    rtol: float = 0.05
    kind: str = "calibrate"


Job = SweepJob | FmuJob | CalibrateJob


@dataclass(frozen=True)
class Limits:
    """The campaign file's top-level limits (docs/campaigns.md, "Limits")."""

    max_tasks: int = 100_000  # a campaign of more tasks is refused (counted, never expanded)
    task_timeout: float = 3600.0  # s of wall-clock time a task may take; an overrun is that task's error
    max_in_flight: int = 0  # tasks submitted and not yet finished; 0: twice the backend's workers


@dataclass(frozen=True)
class Campaign:
    name: str
    source: Path
    jobs: tuple[Job, ...]
    limits: Limits = Limits()


class _Table:
    """One job's TOML table: typed getters whose errors name the file, the job and the key."""

    def __init__(self, path: Path, where: str, data: Mapping[str, Any]) -> None:
        self.path, self.where, self.data, self.used = path, where, data, {"kind", "name"}

    def fail(self, key: str, msg: str) -> CampaignError:
        return CampaignError(f"{self.path}: {self.where}: key {key!r}: {msg}")

    def get(self, key: str, check: Callable[[Any], bool], what: str, default: Any = None) -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is None:
                raise self.fail(key, f"missing (expected {what})")
            return default
        value = self.data[key]
        if not check(value):
            raise self.fail(key, f"expected {what}, got {value!r}")
        return value

    def number(self, key: str, default: float | None = None, positive: bool = True) -> float:
        ok = (lambda v: _is_num(v) and v > 0) if positive else _is_num
        return float(self.get(key, ok, "a positive number" if positive else "a number", default))

    def names(self, key: str, default: tuple[str, ...] | None = None) -> tuple[str, ...]:
        return tuple(self.get(key, lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
                              "a list of strings", default))

    def numbers(self, key: str) -> dict[str, float]:
        return {k: float(v) for k, v in self.get(key, lambda v: isinstance(v, dict) and all(
            _is_num(x) for x in v.values()), "a table of NAME = number", {}).items()}

    def file(self, key: str) -> Path:
        p = Path(resolve_path(self.get(key, lambda v: isinstance(v, str) and v != "", "a file path"), self.path, key))
        if not p.is_file():
            raise self.fail(key, f"no such file: {p}")
        return p

    def finish(self) -> None:
        extra = sorted(set(self.data) - self.used)
        if extra:
            raise self.fail(extra[0], f"unknown key; known keys: {', '.join(sorted(self.used))}")


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _sweep(t: _Table, name: str) -> SweepJob:
    grid = t.get("grid", lambda v: isinstance(v, dict) and v != {} and all(
        isinstance(x, list) and x and all(_is_num(y) for y in x) for x in v.values()),
        "a table of NAME = [numbers, ...]")
    stats = t.names("statistics", STATISTICS)
    for s in stats:
        if s not in STATISTICS:
            raise t.fail("statistics", f"unknown statistic {s!r}; known: {', '.join(STATISTICS)}")
    return SweepJob(name, t.file("mechanism"), {k: tuple(float(x) for x in v) for k, v in grid.items()},
                    t.number("duration"), t.names("outputs"), t.number("output_interval", 0.001), stats,
                    t.numbers("fixed"))


def _fmu(t: _Table, name: str) -> FmuJob:
    inputs = t.get("inputs", lambda v: isinstance(v, dict) and all(isinstance(x, str | int | float)
                                                                    for x in v.values()),
                   "a table of PORT = \"profile\"", {})
    version = t.get("fmi_version", lambda v: str(v) in ("2", "3"), '"2" or "3"', "2")
    return FmuJob(name, t.file("mechanism"), t.number("stop_time", 1.0), t.number("step", 0.001),
                  {k: str(v) for k, v in inputs.items()}, t.numbers("parameters"), t.number("rtol", 1e-9),
                  t.number("atol", 1e-12), str(version), bool(t.get("checks", lambda v: isinstance(v, bool),
                                                                     "true or false", False)))


def _calibrate(t: _Table, name: str) -> CalibrateJob:
    patterns = t.names("recordings")
    found: list[Path] = []
    for pat in patterns:
        hits = sorted(glob.glob(resolve_path(pat, t.path, "recordings")))
        if not hits:
            raise t.fail("recordings", f"{pat!r} matches no file in {t.path.parent}")
        found += [Path(h) for h in hits]
    hold = t.get("hold", lambda v: v in ("foh", "zoh"), '"foh" or "zoh"', "foh")
    stride = t.get("stride", lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
                   "a positive integer", 5)
    return CalibrateJob(name, tuple(found), t.names("params"), t.names("channels", ()),
                        t.number("segment", 0.5), stride, hold, t.numbers("expected"), t.number("rtol", 0.05))


PARSERS: dict[str, Callable[[_Table, str], Job]] = {"sweep": _sweep, "fmu_vs_native": _fmu, "calibrate": _calibrate}


def load_campaign(path: str | Path) -> Campaign:
    """Read and check a campaign file; raises :class:`~mbsd_twin.errors.CampaignError`."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CampaignError(f"{path}: {exc}") from exc
    jobs = data.get("jobs")
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, dict) for j in jobs):
        raise CampaignError(f"{path}: key 'jobs': expected one or more [[jobs]] tables")
    extra = sorted(set(data) - {"name", "jobs", *LIMIT_KEYS})
    if extra:
        raise CampaignError(f"{path}: key {extra[0]!r}: unknown top-level key; known: name, jobs, "
                            + ", ".join(LIMIT_KEYS))
    limits = _limits(path, data)
    out: list[Job] = []
    for k, raw in enumerate(jobs):
        t = _Table(path, f"jobs[{k}]", raw)
        kind = t.get("kind", lambda v: v in PARSERS, " or ".join(f'"{p}"' for p in PARSERS))
        name = t.get("name", lambda v: isinstance(v, str) and v != "", "a non-empty string", f"{kind}-{k}")
        if any(j.name == name for j in out):
            raise t.fail("name", f"job name {name!r} used twice")
        t.where = f"jobs[{k}] ({name})"
        out.append(PARSERS[kind](t, name))
        t.finish()
    campaign = Campaign(str(data.get("name", path.stem)), path, tuple(out), limits)
    check_size(campaign)
    return campaign


LIMIT_KEYS = ("max_tasks", "task_timeout", "max_in_flight")


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _limits(path: Path, data: Mapping[str, Any]) -> Limits:
    t = _Table(path, "top level", data)
    d = Limits()
    return Limits(int(t.get("max_tasks", lambda v: _whole(v) and v > 0, "a positive integer", d.max_tasks)),
                  t.number("task_timeout", d.task_timeout),
                  int(t.get("max_in_flight", _whole, "an integer >= 0 (0: twice the workers)", d.max_in_flight)))


def task_counts(campaign: Campaign) -> dict[str, int]:
    """Tasks per job, counted without expanding: a sweep's grid sizes multiplied, one task per
    recording of a calibration, one per FMU comparison."""
    out = {}
    for job in campaign.jobs:
        if isinstance(job, SweepJob):
            out[job.name] = math.prod(len(v) for v in job.grid.values())
        elif isinstance(job, CalibrateJob):
            out[job.name] = len(job.recordings)
        else:
            out[job.name] = 1
    return out


def check_size(campaign: Campaign) -> int:
    """The campaign's task count; :class:`CampaignError` naming ``max_tasks`` and the count when it
    is above the limit."""
    counts = task_counts(campaign)
    total = sum(counts.values())
    limit = campaign.limits.max_tasks
    if total > limit:
        big = max(counts, key=lambda k: counts[k])
        raise CampaignError(f"{campaign.source}: key 'max_tasks': the campaign has {total} tasks (job {big!r}: "
                            f"{counts[big]}), above max_tasks = {limit}; split it or raise max_tasks")
    return total
