"""Argument parsing shared by the ``mbsd-twin`` sub-commands (the top-level CLI, ``fmu``, ``twin``)."""

from __future__ import annotations

from collections.abc import Sequence


def parse_assignments(items: Sequence[str], option: str) -> dict[str, float]:
    """``["a=1", "b=2.5"]`` → ``{"a": 1.0, "b": 2.5}``; a ValueError names ``option`` and the item."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"{option} expects NAME=VALUE with a number, got {item!r}")
    return out
