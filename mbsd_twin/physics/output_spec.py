"""The description of one named output (a Simulator output port, an FMU output, an MQTT field)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutputSpec:
    """One named output: ``unit`` in ASCII SI notation (``N.m``, ``m/s2``)."""

    name: str
    unit: str
    description: str
