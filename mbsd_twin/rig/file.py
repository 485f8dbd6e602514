"""The rig file: a small TOML file that makes ``mbsd-twin rig`` simulate any mechanism.

Top-level keys are the fields of :class:`.synthetic.RigConfig` (same names, same defaults: the packaged
slider crank's rig) plus ``mechanism`` (a path, relative to the rig file's folder as every relative
path of a configuration file, docs/service-config.md "Relative paths"; "" the packaged slider
crank) and ``duration`` (s). Tables: ``[channels]`` (rig channel → model output, or the driven input
port), ``[noise]`` (channel → σ in its unit), ``[mismatch]`` (model parameter → the rig's true
value). ``faults`` is a list of fault specs (``"input_bias@3.0:motor_torque+0.3"``, see
:mod:`.faults`). Example: ``examples/rigs/pendulum_rig.toml``; docs/connect-your-rig.md.

Every problem is reported at once in one :class:`RigFileError`, each naming the file and the key.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.values import suggest
from ..twin.config.file import _coerce
from ..twin.config.paths import resolve_path
from .faults import parse_fault
from .synthetic import RigConfig


class RigFileError(ValueError):
    """The rig file is invalid; ``problems`` lists every problem found."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{path}: {len(problems)} rig file problem(s)\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class RigFile:
    """A rig file read: the rig, its mechanism file ("" the packaged slider crank) and how long to stream."""

    config: RigConfig = field(default_factory=RigConfig)
    mechanism: str = ""
    duration: float = 10.0


def with_channels(cfg: RigConfig, channels: dict[str, str]) -> RigConfig:
    """``cfg`` publishing ``channels``; noise given only for other channels (the defaults') is dropped."""
    return dataclasses.replace(cfg, channels=dict(channels),
                               noise={ch: sd for ch, sd in cfg.noise.items() if ch in channels})


def _value(key: str, value: Any, default: Any, problems: list[str]) -> Any:
    if isinstance(default, dict):
        if not isinstance(value, dict):
            problems.append(f"[{key}]: expected a table, got {value!r}")
            return default
        want = str if key == "channels" else float
        out = {}
        for k, v in value.items():
            ok, out[k] = _coerce(v, want())
            if not ok or (want is float and not (math.isfinite(out[k]) and (key != "noise" or out[k] >= 0))):
                problems.append(f"[{key}] {k}: expected {'a model output name' if want is str else 'a finite number'}"
                                f"{' >= 0' if key == 'noise' else ''}, got {v!r}")
        return out
    ok, got = _coerce(value, default)
    if not ok:
        problems.append(f"{key}: expected {type(default).__name__}, got {value!r}")
        return default
    return got


def _faults(value: Any, problems: list[str]) -> tuple[Any, ...]:
    if not isinstance(value, list):
        problems.append(f"faults: expected a list of fault specs, got {value!r}")
        return ()
    out = []
    for i, spec in enumerate(value):
        try:
            out.append(parse_fault(str(spec)))
        except ValueError as exc:
            problems.append(f"faults[{i}]: {exc}")
    return tuple(out)


def load_rig_file(path: str | Path) -> RigFile:
    """Read and check a rig file (types and key names; the mechanism checks the names of channels,
    parameters and fault targets when the rig starts); :class:`RigFileError` lists every problem."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RigFileError(str(path), [str(exc)]) from exc
    problems: list[str] = []
    base = RigConfig()
    names = {f.name for f in dataclasses.fields(RigConfig)}
    kw: dict[str, Any] = {}
    top: dict[str, Any] = {"mechanism": "", "duration": 10.0}
    for key, value in data.items():
        if key == "faults":
            kw[key] = _faults(value, problems)
        elif key in names:
            kw[key] = _value(key, value, getattr(base, key), problems)
        elif key in top:
            top[key] = _value(key, value, top[key], problems)
        else:
            known = sorted(names | set(top))
            problems.append(f"unknown key {key!r}{suggest(key, known)}; known: {', '.join(known)}")
    if not top["duration"] > 0:
        problems.append(f"duration must be > 0 s, got {top['duration']!r}")
    cfg = dataclasses.replace(base, **kw)
    if "channels" in kw and "noise" not in kw:
        cfg = with_channels(cfg, kw["channels"])
    try:
        cfg.samples_per_knot()
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise RigFileError(str(path), problems)
    return RigFile(cfg, resolve_path(top["mechanism"], path, "mechanism"), top["duration"])
