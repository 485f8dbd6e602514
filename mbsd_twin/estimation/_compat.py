"""Stand-ins for Simulator.snapshot / restore / set_parameter(keep_state=True) until the fast
engine versions land (they use them when present)."""

from __future__ import annotations

from typing import Any

from ..simulator import Simulator


def snapshot(sim: Simulator) -> Any:
    return sim.snapshot() if hasattr(sim, "snapshot") else sim.get_state()


def restore(sim: Simulator, snap: Any) -> None:
    if hasattr(sim, "snapshot"):
        sim.restore(snap)  # type: ignore[attr-defined]
    else:
        sim.set_state(snap)


def set_parameter_keep(sim: Simulator, name: str, value: float) -> None:
    if hasattr(sim, "snapshot"):
        sim.set_parameter(name, value, keep_state=True)  # type: ignore[call-arg]
        return
    s = sim.system
    out = sim.outputs()
    t, inputs = sim.time, {p.name: p.start for p in sim.input_ports}
    pos = {f"{b}.{c}": out[f"{b}.{c}"] for b in s.body_names for c in ("x", "y", "theta")}
    vel = {f"{b}.{c}": out[f"{b}.{c}"] for b in s.body_names for c in ("vx", "vy", "omega")}
    sim.set_parameter(name, value)
    for k, v in inputs.items():
        sim.set_input(k, v)
    sim.set_configuration(pos, vel, time=t)
