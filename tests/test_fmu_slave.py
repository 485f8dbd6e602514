"""The FMI 2.0 and 3.0 slave classes driven directly in Python (no PythonFMU binary, no importer):
the bulk getters and setters (``get_real``/``set_real``, ``get_float64``/``set_float64``) against the
native Simulator, number by number. The FMUs themselves are tested in test_fmu.py and test_fmu3.py.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("pythonfmu")
pytest.importorskip("pythonfmu3")

from mbsd_twin.fmi.build import bundled_slider_crank  # noqa: E402
from mbsd_twin.fmi.fmi3 import MechanismSlave3  # noqa: E402
from mbsd_twin.fmi.native import build_simulator  # noqa: E402
from mbsd_twin.fmi.slave import META_FILE, MechanismSlave  # noqa: E402
from mbsd_twin.fmi.variables import SLIDER_CRANK_OUTPUTS  # noqa: E402
from mbsd_twin.model.loader import load_mechanism  # noqa: E402
from mbsd_twin.simulation.simulator import Simulator  # noqa: E402

INPUTS = ("motor_torque", "piston_force")
# (motor_torque, piston_force) held over each 1 ms step; some steps change nothing, some one input
SCHEDULE = [(2.0, 0.0)] * 3 + [(2.0, -20.0), (-1.0, -20.0), (-1.0, -20.0), (3.0, 5.0)] * 3


def _resources(tmp: Path, outputs: list[str]) -> Path:
    res = tmp / "resources"
    res.mkdir()
    shutil.copyfile(bundled_slider_crank(), res / "mechanism.toml")
    (res / META_FILE).write_text(json.dumps({"mechanism": "mechanism.toml", "model_name": "SliderCrank",
                                             "outputs": outputs}), encoding="utf-8")
    return res


class Api:
    """One slave class behind the names of its FMI version's bulk calls."""

    def __init__(self, cls: type, resources: Path) -> None:
        self.s: Any = cls(instance_name="test", resources=str(resources))
        self.fmi3 = cls is MechanismSlave3
        self.vr = {v.name: vr for vr, v in self.s.vars.items()}
        self.outputs = [v.name for v in self.s.vars.values() if v.causality.name == "output"]

    def get(self, names: list[str]) -> list[float]:
        vrs = [self.vr[n] for n in names]
        return self.s.get_float64(vrs) if self.fmi3 else self.s.get_real(vrs)

    def set(self, names: list[str], values: list[float]) -> None:
        vrs = [self.vr[n] for n in names]
        if self.fmi3:
            self.s.set_float64(vrs, values)
        else:
            self.s.set_real(vrs, values)

    def init(self) -> None:
        self.s.setup_experiment(0.0)
        self.s.enter_initialization_mode()
        self.s.exit_initialization_mode()

    def step(self, t: float, h: float) -> bool:
        res = self.s.do_step(t, h)
        return res if isinstance(res, bool) else res.status.name == "ok"


def _native(sim: Simulator, names: list[str]) -> list[float]:
    return [sim.get_output(n) for n in names]


def _close(fmu: list[float], native: list[float]) -> None:
    np.testing.assert_allclose(fmu, native, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cls", [MechanismSlave, MechanismSlave3], ids=["fmi2", "fmi3"])
@pytest.mark.parametrize("outputs", [["all"], list(SLIDER_CRANK_OUTPUTS)], ids=["all", "slider_crank"])
def test_bulk_get_set_equal_the_native_simulator(cls: type, outputs: list[str], tmp_path: Path) -> None:
    api = Api(cls, _resources(tmp_path, outputs))
    api.init()
    sim = build_simulator(load_mechanism(bundled_slider_crank()), {}, {}, 0.0, dict.fromkeys(INPUTS, 0.0))
    names = api.outputs
    assert "main_bearing.fx" in names and ("crank.alpha" in names) == (outputs == ["all"])
    _close(api.get(names), _native(sim, names))
    for k, (torque, force) in enumerate(SCHEDULE):
        t = k * 1e-3
        api.set(list(INPUTS), [torque, force])          # every input in one call (what fmpy does)
        sim.set_input("motor_torque", torque)
        sim.set_input("piston_force", force)
        # Before the step: the new inputs are felt at once by the feed-through outputs.
        _close(api.get(names), _native(sim, names))
        assert api.step(t, 1e-3)
        sim.advance_to(t + 1e-3)
        _close(api.get(names), _native(sim, names))
    assert abs(sim.get_output("crank.omega")) > 0.1  # the run does something

    # One input alone, outputs in another order and mixed with inputs and parameters.
    api.set(["piston_force"], [40.0])
    sim.set_input("piston_force", 40.0)
    mixed = ["main_bearing.fy", "piston_force", "crank.theta", "rod.mass", "motor_torque", "main_bearing.fx"]
    assert api.get(mixed) == [sim.get_output("main_bearing.fy"), 40.0, sim.get_output("crank.theta"), 2.0,
                              3.0, sim.get_output("main_bearing.fx")]

    # A non-finite input: every output NaN, the step discarded; a finite one again: back in step.
    before = api.get(names)
    api.set(list(INPUTS), [math.nan, 40.0])
    assert all(math.isnan(x) for x in api.get(names))
    assert not api.step(len(SCHEDULE) * 1e-3, 1e-3)
    api.set(["motor_torque"], [3.0])
    assert api.get(names) == before
    assert api.step(len(SCHEDULE) * 1e-3, 1e-3)
    sim.advance_to((len(SCHEDULE) + 1) * 1e-3)
    _close(api.get(names), _native(sim, names))


@pytest.mark.parametrize("cls", [MechanismSlave, MechanismSlave3], ids=["fmi2", "fmi3"])
def test_state_round_trip_and_outputs_are_read_only(cls: type, tmp_path: Path) -> None:
    api = Api(cls, _resources(tmp_path, list(SLIDER_CRANK_OUTPUTS)))
    api.init()
    names = api.outputs
    api.set(list(INPUTS), [2.0, 0.0])
    for k in range(5):
        api.step(k * 1e-3, 1e-3)
    state = api.s._get_fmu_state()
    first = []
    for k in range(5, 10):
        api.set(["motor_torque"], [-1.0 - k])
        api.step(k * 1e-3, 1e-3)
        first.append(api.get(names))
    api.set(list(INPUTS), [99.0, 99.0])
    api.s._set_fmu_state(state)
    assert api.get(list(INPUTS)) == [2.0, 0.0]
    again = []
    for k in range(5, 10):
        api.set(["motor_torque"], [-1.0 - k])
        api.step(k * 1e-3, 1e-3)
        again.append(api.get(names))
    assert again == first  # bit-identical after the rollback
    with pytest.raises(TypeError):
        api.set(["crank.theta"], [1.0])
