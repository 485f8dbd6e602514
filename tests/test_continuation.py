"""The compiled stepper keeps its internal steps across communication points while the inputs hold
still (dense output, projected), restarts when they change; the step-size control's error norm
(max or rms) and whether it includes the energy integrals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mbsd_twin as mt

FREE = Path(__file__).resolve().parents[1] / "examples" / "mechanisms" / "slider_crank.toml"
TORQUE = 2.0


def _run(opts: mt.SolverOptions, times: np.ndarray, torque: float = TORQUE) -> tuple[mt.Simulator, list[dict]]:
    sim = mt.Simulator(mt.load_mechanism(FREE), opts)
    sim.set_input("motor_torque", torque)
    out = []
    for t in times:
        sim.advance_to(float(t))
        out.append(sim.outputs())
    return sim, out


@pytest.fixture(scope="module")
def reference() -> mt.Result:
    """Tight-tolerance run clipped to 10 ms points (an independent step sequence)."""
    return mt.simulate(mt.load_mechanism(FREE), 0.5, 0.01, inputs={"motor_torque": TORQUE},
                       options=mt.SolverOptions(rtol=1e-12, atol=1e-14, max_step=1e-3))


def test_constant_inputs_give_the_same_internal_steps_for_any_communication_grid(reference: mt.Result) -> None:
    fine_t = np.arange(1, 501) * 1e-3
    fine, fine_out = _run(mt.SolverOptions(backend="compiled"), fine_t)
    coarse, coarse_out = _run(mt.SolverOptions(backend="compiled"), fine_t[99::100])
    # the grid does not enter the integration at all: same steps, bit-identical common points
    assert fine._stepper.steps == coarse._stepper.steps
    assert fine._stepper.steps < 400          # steps of several ms, not clipped to 1 ms
    for k in range(5):
        assert fine_out[100 * k + 99] == coarse_out[k]
    # served from the dense output, projected: on the constraints and on the exact trajectory
    assert max(o["constraints.position_residual"] for o in fine_out) < 1e-12
    theta = np.array([o["crank.theta"] for o in fine_out])[9::10]
    omega = np.array([o["crank.omega"] for o in fine_out])[9::10]
    assert np.abs(theta - reference["crank.theta"][1:]).max() < 1e-8
    assert np.abs(omega - reference["crank.omega"][1:]).max() < 1e-7
    assert abs(fine_out[-1]["energy.balance_error"]) < 1e-8 * fine_out[-1]["energy.input_work"]


def test_an_input_change_inside_an_internal_step_restarts_from_the_communication_point() -> None:
    """Torque switches at 0.2505 s, inside an internal step: the compiled stepper (restart from the
    interpolated point) and the numpy stepper (scipy, clipped to every point) agree within the
    tolerance, and the switch is felt from 0.2505 s on, not from the end of the internal step."""
    times = np.arange(1, 401) * 1e-3 + 0.0005
    runs = {}
    for backend in ("compiled", "numpy"):
        sim = mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(backend=backend, rtol=1e-10, atol=1e-12))
        rows = []
        for t in times:
            sim.set_input("motor_torque", TORQUE if t <= 0.2505 else -3.0)
            sim.advance_to(float(t))
            rows.append([sim.get_output("crank.theta"), sim.get_output("crank.omega")])
        runs[backend] = np.array(rows)
    np.testing.assert_allclose(runs["compiled"], runs["numpy"], rtol=0, atol=1e-7)
    switched, _ = _run(mt.SolverOptions(backend="compiled"), np.array([0.2505]))
    assert runs["compiled"][249, 0] == pytest.approx(switched._stepper.y[2], abs=1e-7)


def test_state_saved_inside_an_internal_step_continues_bit_identically() -> None:
    sim, _ = _run(mt.SolverOptions(backend="compiled"), np.array([0.2003]))
    S = sim._stepper._S
    assert S[1] < sim.time < S[2]             # inside the last internal step (dense output in use)
    blob = sim.get_state()
    later = [0.2003 + k * 1e-3 for k in range(1, 40)]
    first = []
    for t in later:
        sim.advance_to(t)
        first.append(sim.outputs())
    other = mt.Simulator(mt.load_mechanism(FREE))
    other.set_state(blob)
    again = []
    for t in later:
        other.advance_to(t)
        again.append(other.outputs())
    assert again == first


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_energy_error_control_takes_more_steps_and_tightens_the_balance(backend: str,
                                                                        reference: mt.Result) -> None:
    times = np.arange(1, 21) * 0.1             # 2 s: the crank spins up to ~20 rad/s
    off, off_out = _run(mt.SolverOptions(backend=backend), times)
    on, on_out = _run(mt.SolverOptions(backend=backend, energy_error_control=True), times)
    assert on._stepper.steps > 2 * off._stepper.steps  # measured 1181 vs 381 (compiled)
    for out in (off_out, on_out):
        theta = np.array([o["crank.theta"] for o in out[:5]])
        assert np.abs(theta - reference["crank.theta"][10::10]).max() < 1e-7
    # the balance closes at the default, and about a thousand times tighter with the integrals in
    work = on_out[-1]["energy.input_work"]
    assert work > 100.0                        # 2 N·m over ~54 rad
    assert abs(off_out[-1]["energy.balance_error"]) < 1e-8 * work
    assert abs(on_out[-1]["energy.balance_error"]) < 1e-11 * work


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_max_error_norm_holds_the_crank_angle_where_the_rms_norm_lets_it_drift(backend: str) -> None:
    """Same rtol 1e-8, 2 s at 2 N·m against an rtol 1e-12 run: the max norm (default) keeps every
    coordinate within its tolerance; scipy's root mean square over 21 components lets the crank
    angle, the one coordinate that grows, be off by about √21 times more per step."""
    times = np.arange(1, 21) * 0.1
    ref = mt.simulate(mt.load_mechanism(FREE), 2.0, 0.1, inputs={"motor_torque": TORQUE},
                      options=mt.SolverOptions(rtol=1e-12, atol=1e-14, max_step=1e-3))
    steps, errors = {}, {}
    for norm in ("max", "rms"):
        sim, out = _run(mt.SolverOptions(backend=backend, error_norm=norm), times)
        theta = np.array([o["crank.theta"] for o in out])
        steps[norm], errors[norm] = sim._stepper.steps, np.abs(theta - ref["crank.theta"][1:]).max()
    assert errors["max"] < 5e-8                # measured 7e-9 (compiled), 2e-9 (numpy)
    assert errors["rms"] > 5e-8                # measured 2.1e-7, 2.5e-7
    assert steps["rms"] < steps["max"] < 1.5 * steps["rms"]   # 296 → 381: the 8th order's price
    # both backends implement the same norm: the same steps, the numpy one clipped to the 20 points
    other, _ = _run(mt.SolverOptions(backend="compiled" if backend == "numpy" else "numpy"), times)
    assert abs(other._stepper.steps - steps["max"]) <= len(times)


def test_error_norm_must_be_max_or_rms() -> None:
    with pytest.raises(mt.MechanismError, match="error_norm must be one of max, rms, got 'l2'"):
        mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(error_norm="l2"))


def test_energy_error_control_must_be_a_boolean() -> None:
    with pytest.raises(mt.MechanismError, match="energy_error_control must be true or false"):
        mt.Simulator(mt.load_mechanism(FREE), mt.SolverOptions(energy_error_control=1))  # type: ignore[arg-type]
