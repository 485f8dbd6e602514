"""A twin configuration's names checked against its mechanism before anything is built: every
``[core]`` entry that names a model output, input port, parameter or coordinate, and the
``[service] mechanism`` file itself. Each problem names its key, the value, the closest valid
name ("did you mean") and the valid names, and all of them come in one
:class:`~.config.ConfigError` — as the mechanism file's own errors do."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model.values import suggest
from ..simulation.simulator import Simulator
from .config.sections import ConfigError, CoreConfig, TwinConfig

if TYPE_CHECKING:
    from ..model.model import Mechanism

SHOWN = 40  # most valid names listed in one problem


def _listing(valid: Sequence[str]) -> str:
    names = list(valid)
    more = f", … ({len(names)} in all)" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more or "none"


KINDS = {"output": ("an output", "outputs"), "input": ("an input port", "input ports"),
         "coordinate": ("a body coordinate", "body coordinates"),
         "unknown": ("a parameter or input bias", "parameters and input biases")}


def _check(problems: list[str], where: str, name: str, valid: Sequence[str], kind: str) -> None:
    if name not in valid:
        one, many = KINDS[kind]
        problems.append(f"{where}: {name!r} is not {one} of the mechanism{suggest(name, valid)}; "
                        f"{many}: {_listing(valid)}")


def mechanism_file(cfg: TwinConfig, default: str) -> str:
    """The ``[service] mechanism`` path (``default`` when unset); :class:`ConfigError` naming the key,
    the value and the path it resolves to when there is no such file (a path of the configuration
    file is resolved already: relative to its folder; one from the command line or the environment
    is relative to the working directory)."""
    path = cfg.service.mechanism or default
    if not os.path.isfile(path):
        why = "is a folder" if os.path.isdir(path) else "no such file"
        where = "" if os.path.isabs(path) else f" ({os.path.abspath(path)})"
        raise ConfigError([f"[service] mechanism = {path!r}{where}: {why}"], cfg.source or "<config>")
    return path


def name_problems(core: CoreConfig, sim: Simulator) -> list[str]:
    """Every ``[core]`` name that ``sim`` (the twin's mechanism) does not have."""
    problems: list[str] = []
    outputs = sim.output_names()
    inputs = [p.name for p in sim.input_ports]
    coords = [o for o in outputs if o.rsplit(".", 1)[-1] in ("x", "y", "theta") and o.count(".") == 1]
    for ch, out in core.compare.items():
        _check(problems, f"[core.compare] {ch}", out, outputs, "output")
    for ch, port in core.inputs.items():
        _check(problems, f"[core.inputs] {ch}", port, inputs, "input")
    for key in ("state_extra", "virtual"):
        for out in getattr(core, key):
            _check(problems, f"[core] {key}", out, outputs, "output")
    for name in core.coordinates:
        _check(problems, "[core] coordinates", name, coords, "coordinate")
    unknowns = [p.name for p in sim.parameters] + [f"{port}.bias" for port in inputs]
    for i, aug in enumerate(core.augment):
        _check(problems, f"[[core.augment]] #{i + 1} name", aug.name, unknowns, "unknown")
    return problems


def check_names(core: CoreConfig, mech: Mechanism) -> None:
    """:class:`ConfigError` with every problem of :func:`name_problems`, if any (the mechanism's
    Simulator is built for its names: the twin's own comes later)."""
    problems = name_problems(core, Simulator(mech))
    if problems:
        raise ConfigError(problems, f"[core] against the mechanism {mech.source}")
