"""Units for a CSV that carries none (fmpy's result, a history export), from the file that defines
its columns: an FMU (its modelDescription.xml), a mechanism TOML (its outputs, inputs and
parameters) or a twin configuration TOML (its mechanism and its compared channels)."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

from ..dashboard.figures import base_units, channel_units, twin_units


def units_of(path: str | Path) -> dict[str, str]:
    """Unit by name from an FMU, a mechanism TOML (it has ``[[bodies]]``) or a twin TOML."""
    p = Path(path)
    if p.suffix.lower() == ".fmu":
        from fmpy import read_model_description

        md = read_model_description(str(p))
        return {v.name: v.unit for v in md.modelVariables if getattr(v, "unit", None)}
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{p}: --units expects an FMU, a mechanism TOML or a twin TOML: {exc}") from None
    if "bodies" in data:
        from ..model.loader import load_mechanism

        return base_units(load_mechanism(p), {})
    return twin_units(str(p))


def column_units(path: str | Path) -> Callable[[list[str]], dict[str, str]]:
    """columns → their units from ``path``: by name, else as a history channel ``<topic>.<name>``."""
    units = units_of(path)

    def lookup(columns: list[str]) -> dict[str, str]:
        by_channel = channel_units(columns, units)
        return {c: units.get(c) or by_channel[c] for c in columns if units.get(c) or by_channel[c]}

    return lookup
