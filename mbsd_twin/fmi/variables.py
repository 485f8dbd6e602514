"""The FMU's variables, derived from a :class:`~mbsd_twin.Simulator`'s ports — the one table used by
the slave, the modelDescription post-processor and the documentation.

Rule for the outputs of a mechanism (patterns are ``fnmatch`` globs over the Simulator's output
names, see :data:`GENERIC_OUTPUTS`):

- every body's ``x``, ``y``, ``vx``, ``vy``, ``theta`` and ``omega`` (world frame);
- every reaction ``<joint>.fx/.fy/.mz`` and every driver effort ``<driver>.effort``;
- every ``energy.*`` term and ``constraints.position_residual``.

The bundled slider crank uses :data:`SLIDER_CRANK_OUTPUTS` (crank angle and speed, piston position
and speed, all reactions, energy and residual). ``mbsd-twin fmu build --outputs`` takes other
patterns (``all`` keeps every output, accelerations included).

Inputs are every load input port; parameters are the model's fixed parameters (masses, inertias,
centres of mass, joint points, friction, spring constants) and the tunable solver settings
``solver.rtol`` and ``solver.max_step`` (0 means no limit: FMI start values must be finite).
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..simulation.simulator import Simulator

GENERIC_OUTPUTS = ("*.x", "*.y", "*.vx", "*.vy", "*.theta", "*.omega", "*.fx", "*.fy", "*.mz", "*.effort", "energy.*",
                   "constraints.*")
SLIDER_CRANK_OUTPUTS = ("crank.theta", "crank.omega", "piston.x", "piston.vx", "*.fx", "*.fy", "*.mz",
                        "*.effort", "energy.*", "constraints.*")
# Outputs that depend directly (same instant) on the inputs: accelerations, reactions, efforts.
FEEDTHROUGH_SUFFIXES = (".ax", ".ay", ".alpha", ".fx", ".fy", ".mz", ".effort")
NO_LIMIT = 0.0  # FMU value of solver.max_step meaning "no limit" (the engine's inf)


@dataclass(frozen=True)
class FmuVariable:
    """One FMU variable: causality input/output/parameter; variability continuous/fixed/tunable."""

    name: str
    causality: str
    variability: str
    unit: str
    description: str
    start: float | None = None

    @property
    def initial(self) -> str:
        return "calculated" if self.causality == "output" else "exact"

    @property
    def feedthrough(self) -> bool:
        """Output that changes at once when an input changes (no integration in between)."""
        return self.causality == "output" and self.name.endswith(FEEDTHROUGH_SUFFIXES)


def select_outputs(names: Sequence[str], patterns: Sequence[str]) -> list[str]:
    """Output names matching any pattern, in the Simulator's order; ``"all"`` matches everything."""
    if "all" in patterns:
        return list(names)
    return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def to_fmu_value(name: str, value: float) -> float:
    """Engine value → FMU value (``solver.max_step`` inf → 0)."""
    return NO_LIMIT if name == "solver.max_step" and math.isinf(value) else float(value)


def fmu_variables(sim: Simulator, output_patterns: Sequence[str] = GENERIC_OUTPUTS) -> list[FmuVariable]:
    """Inputs, then the selected outputs, then parameters (fixed, then tunable)."""
    out = [FmuVariable(p.name, "input", "continuous", p.unit, p.description, p.start) for p in sim.input_ports]
    ports = {p.name: p for p in sim.output_ports}
    chosen = select_outputs(list(ports), output_patterns)
    if not chosen:
        raise ValueError(f"no output matches {', '.join(output_patterns)}; outputs are: {', '.join(ports)}")
    out += [FmuVariable(n, "output", "continuous", ports[n].unit, ports[n].description) for n in chosen]
    for p in sim.parameters:
        out.append(FmuVariable(p.name, "parameter", p.variability, p.unit, p.description,
                               to_fmu_value(p.name, p.value)))
    seen: set[str] = set()
    for v in out:
        if v.name in seen:
            raise ValueError(f"variable name {v.name!r} is used twice (an input port named like an output?)")
        seen.add(v.name)
    return out


def markdown_table(variables: Sequence[FmuVariable]) -> str:
    """The variable table (name, causality, variability, unit, start, description) as Markdown."""
    lines = ["| name | causality | variability | unit | start | description |",
             "| --- | --- | --- | --- | --- | --- |"]
    for v in variables:
        start = "" if v.start is None else repr(v.start)
        desc = v.description.replace("|", "\\|")
        lines.append(f"| `{v.name}` | {v.causality} | {v.variability} | {v.unit} | {start} | {desc} |")
    return "\n".join(lines) + "\n"
