"""The compiled filter sample (estimation.nb_filter) and the engine calls under it, against the
Python API they replace: ``Simulator.advance_held`` against ``set_input`` + ``advance_to`` row by
row, and ``StateEstimator.sample`` against ``predict`` + ``update`` — bit for bit (the same
operations in the same order, so any difference is a bug, not rounding), including Jacobian
refreshes, parameter writes, an unknown input bias and a mechanism without inputs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.estimation.ekf import Augment, FilterConfig, StateEstimator
from mbsd_twin.estimation.holds import interval_steps
from mbsd_twin.model.loader import bundled_slider_crank

PENDULUM = "examples/mechanisms/double_pendulum.toml"


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_advance_held_is_set_input_and_advance_to_row_by_row(backend: str) -> None:
    """400 half-millisecond rows of a noisy torque with a held stretch (rows equal to the previous:
    no restart) give the same state, bit for bit, as the row-by-row API."""
    mech = mt.load_mechanism(bundled_slider_crank())
    opts = mt.SolverOptions(backend=backend)  # type: ignore[arg-type]
    a, b = mt.Simulator(mech, opts), mt.Simulator(mech, opts)
    rng = np.random.default_rng(1)
    times = np.arange(1, 401) * 5e-4
    U = np.column_stack([rng.normal(1.0, 0.5, 400), np.zeros(400)])
    U[100:120, 0] = 0.7
    for t, (tau, f) in zip(times, U, strict=True):
        a.set_input("motor_torque", tau)
        a.set_input("piston_force", f)
        a.advance_to(t)
    b.advance_held(times, U)
    assert b.time == a.time == pytest.approx(0.2)
    assert np.array_equal(a.output_vector(), b.output_vector())
    assert a.get_state() == b.get_state()
    assert b.get_input("motor_torque") == U[-1, 0]


def test_advance_held_refuses_wrong_shapes_and_non_finite_inputs() -> None:
    sim = mt.Simulator(mt.load_mechanism(bundled_slider_crank()))
    with pytest.raises(mt.PortError, match="1 input columns for 2 input ports"):
        sim.advance_held(np.array([1e-3]), np.array([[1.0]]))
    with pytest.raises(mt.PortError, match="finite"):
        sim.advance_held(np.array([1e-3]), np.array([[np.nan, 0.0]]))
    assert sim.time == 0.0


def _slider_crank_stream(n: int) -> tuple[list[float], list[float], list[float]]:
    """Crank angle and speed of the model under a varying torque, with encoder and tachometer
    noise, and the torque samples."""
    truth = mt.Simulator(mt.load_mechanism(bundled_slider_crank()))
    rng = np.random.default_rng(3)
    tau = [1.5 + np.sin(7.0 * k * 1e-3) for k in range(n)]
    th, om = [], []
    for k in range(n):
        if k:
            truth.set_input("motor_torque", 0.5 * (tau[k - 1] + tau[k]))
            truth.advance_to(k * 1e-3)
        th.append(truth.get_output("crank.theta") + rng.normal(0.0, 1e-3))
        om.append(truth.get_output("crank.omega") + rng.normal(0.0, 0.01))
    return th, om, tau


CRANK_FILTER = FilterConfig(("crank.theta",), {"crank.theta": 1e-3, "crank.omega": 0.01}, accel_noise=0.01,
                            augment=(Augment("piston.mass", 0.3, 0.01, value=1.2, low=0.1, high=10.0),
                                     Augment("motor_torque.bias", 0.5, 0.01)),
                            input_noise={"motor_torque": 0.002}, jacobian_every=3)


def test_the_compiled_sample_is_predict_and_update_bit_for_bit() -> None:
    """Slider crank, crank angle and speed measured, the piston mass (20 % wrong prior: written into
    the model as it converges) and a torque bias estimated, Jacobians every 3 samples: 600 samples
    through ``sample`` (the compiled kernels) and through ``predict`` + ``update`` agree exactly —
    state, covariance, innovations, NIS and the Simulator's whole state."""
    mech = mt.load_mechanism(bundled_slider_crank())
    cfg = CRANK_FILTER
    th, om, tau = _slider_crank_stream(600)
    fused, ref = StateEstimator(mt.Simulator(mech), cfg), StateEstimator(mt.Simulator(mech), cfg)
    for est in (fused, ref):
        est.initialize(0.0, {"crank.theta": th[0]}, {"crank.omega": om[0]}, {"motor_torque": tau[0]})
    writes = 0
    for k in range(1, 600):
        steps = interval_steps((k - 1) * 1e-3, k * 1e-3, {"motor_torque": tau[k - 1]}, {"motor_torque": tau[k]})
        meas = {"crank.theta": th[k], "crank.omega": om[k]}
        before = fused.applied["piston.mass"]
        a = fused.sample(steps, {"motor_torque": tau[k]}, meas)
        ref.predict(steps, {"motor_torque": tau[k]})
        b = ref.update(meas)
        assert a is not None and b is not None
        writes += fused.applied["piston.mass"] != before
        assert np.array_equal(fused.x, ref.x) and np.array_equal(fused.P, ref.P), k
        assert np.array_equal(a.nu, b.nu) and a.nis == b.nis and np.array_equal(a.dx_sd, b.dx_sd)
    assert fused.sim.get_state() == ref.sim.get_state()
    assert writes > 10  # the parameter-write path was taken, and so was the compiled one
    assert abs(fused.x[2] - 1.5) < 0.075  # the file's piston mass within 5 %, from the 1.2 prior


def test_the_fixed_step_prediction_agrees_with_the_error_controlled_one() -> None:
    """``prediction_step`` 1 ms: the prediction in classic Runge–Kutta steps (one per
    half-millisecond row of the first-order hold, as at the twin's default of 2 ms) against DOP853
    under error control, on the stream and filter of the bit-for-bit test (crank up to 31 rad/s,
    piston mass and torque bias estimated). A fourth-order step's local error is about (ω·h)⁵/5!
    of the motion, 7e-12 at 31 rad/s and h = 0.5 ms, far below the 1e-3 rad encoder: every state
    component within 1e-3 of its σ of the reference and every innovation within 1e-6 rad (rad/s)
    at every sample (measured: 5e-5 σ and 2e-7, the reference's own rtol-bound error dominating),
    and the two runs are not the same computation."""
    mech = mt.load_mechanism(bundled_slider_crank())
    th, om, tau = _slider_crank_stream(600)
    fixed = StateEstimator(mt.Simulator(mech), replace(CRANK_FILTER, prediction_step=1e-3))
    ref = StateEstimator(mt.Simulator(mech), CRANK_FILTER)
    for est in (fixed, ref):
        est.initialize(0.0, {"crank.theta": th[0]}, {"crank.omega": om[0]}, {"motor_torque": tau[0]})
    steps_before = fixed.sim._stepper.steps
    differ = False
    for k in range(1, 600):
        steps = interval_steps((k - 1) * 1e-3, k * 1e-3, {"motor_torque": tau[k - 1]}, {"motor_torque": tau[k]})
        meas = {"crank.theta": th[k], "crank.omega": om[k]}
        a = fixed.sample(steps, {"motor_torque": tau[k]}, meas)
        b = ref.sample(steps, {"motor_torque": tau[k]}, meas)
        assert a is not None and b is not None
        assert np.all(np.abs(fixed.x - ref.x) <= 1e-3 * ref.sd()), k
        assert np.abs(a.nu - b.nu).max() <= 1e-6, k
        differ = differ or not np.array_equal(a.nu, b.nu)
    assert differ
    assert fixed.sim._stepper.steps - steps_before == 2 * 599  # one step per row, counted for the work limit
    assert abs(fixed.x[2] - 1.5) < 0.075  # the file's piston mass within 5 %, as the reference


def test_the_compiled_sample_on_a_mechanism_without_inputs() -> None:
    """Double pendulum (two degrees of freedom, no input ports): both angles measured, 300 samples,
    Jacobians every sample: ``sample`` and ``predict`` + ``update`` agree exactly and the estimate
    follows the true motion within 3 σ."""
    mech = mt.load_mechanism(PENDULUM)
    truth = mt.Simulator(mech)
    coords = ("upper.theta", "lower.theta")
    cfg = FilterConfig(coords, {c: 1e-3 for c in coords}, accel_noise=0.05)
    fused, ref = StateEstimator(mt.Simulator(mech), cfg), StateEstimator(mt.Simulator(mech), cfg)
    for est in (fused, ref):
        est.initialize(0.0, {}, {}, {})
    rng = np.random.default_rng(5)
    for k in range(1, 300):
        truth.advance_to(k * 1e-3)
        meas = {c: truth.get_output(c) + rng.normal(0.0, 1e-3) for c in coords}
        fused.sample([(k * 1e-3, {})], {}, meas)
        ref.predict([(k * 1e-3, {})], {})
        ref.update(meas)
        assert np.array_equal(fused.x, ref.x) and np.array_equal(fused.P, ref.P), k
    err = fused.x[:2] - np.array([truth.get_output(c) for c in coords])
    assert np.all(np.abs(err) < 3.0 * fused.sd()[:2])


@pytest.mark.parametrize("speed", [2.0, 38.0, 100.0])
def test_fixed_step_jacobians_match_the_error_controlled_runs(speed: float) -> None:
    """The compiled linearisation marches its finite-difference runs in fixed Runge–Kutta steps;
    the Python path (``linearisation.stepwise``) runs them through the Simulator's API under the
    integrator's error control, here at rtol 1e-11 (the reference: at the default rtol its own
    error, 1e-5 of F at a dead centre at 38 rad/s, is a hundred times the compiled runs'). On the
    slider crank at 2, 38 and 100 rad/s, at a dead centre and between, with the piston mass and a
    torque bias estimated: F, H and B agree within 1e-8 + 2·(ω·h)⁴ of each matrix's largest entry
    (h = 1 ms): a fourth-order step's error in the flow's derivative is O((ω·h)⁴), 2e-4 at
    100 rad/s (measured 6e-7), 4e-6 at 38 (measured 1.2e-7), round-off at 2 rad/s."""
    from mbsd_twin.estimation import linearisation

    mech = mt.load_mechanism(bundled_slider_crank())
    cfg = FilterConfig(("crank.theta",), {"crank.theta": 1e-3, "crank.omega": 0.01, "main_bearing.fx": 0.5},
                       augment=(Augment("piston.mass", 0.3, 0.01), Augment("motor_torque.bias", 0.5, 0.01)),
                       input_noise={"motor_torque": 0.002})
    for theta in (0.0, 1.1):  # a dead centre, and mid-stroke
        est = StateEstimator(mt.Simulator(mech), cfg)
        est.initialize(0.0, {"crank.theta": theta}, {"crank.omega": speed}, {"motor_torque": 1.0})
        steps = interval_steps(0.0, 1e-3, {"motor_torque": 1.0}, {"motor_torque": 1.3})
        start = est.sim.snapshot()
        compiled = est._linearise(start, 1e-3, steps, {"motor_torque": 1.3}, ("motor_torque",))
        tight = StateEstimator(mt.Simulator(mech, options=mt.SolverOptions(rtol=1e-11, atol=1e-13)), cfg)
        tight.initialize(0.0, {"crank.theta": theta}, {"crank.omega": speed}, {"motor_torque": 1.0})
        reference = linearisation.stepwise(tight, tight.sim.snapshot(), 1e-3, steps, {"motor_torque": 1.3},
                                           ("motor_torque",))
        for a, b in ((compiled.F, reference.F), (compiled.H, reference.H),
                     (compiled.B["motor_torque"], reference.B["motor_torque"])):
            assert np.abs(a - b).max() <= (1e-8 + 2.0 * (speed * 1e-3) ** 4) * np.abs(b).max(), (speed, theta)
        assert not np.array_equal(compiled.F, reference.F)  # two different integrations, not one


def test_buffers_and_indices() -> None:
    """The compiled arrays are offered only on the compiled path; the state and parameter indices
    point at the values the Simulator reports."""
    mech = mt.load_mechanism(bundled_slider_crank())
    assert mt.Simulator(mech, mt.SolverOptions(backend="numpy")).buffers() is None
    sim = mt.Simulator(mech)
    b = sim.buffers()
    assert b is not None
    n = sim.system.n_coord
    k = sim.state_index("crank.theta")
    assert sim.get_output("crank.theta") == sim._stepper.y[k]
    assert sim.get_output("crank.omega") == sim._stepper.y[n + sim.state_index("crank.omega")]
    i = sim.parameter_index("piston.mass")
    assert i is not None and b.fb[i] == 1.5
    assert sim.parameter_index("main_bearing.p1_x") is None  # geometry: not live
    with pytest.raises(mt.PortError, match="crank.fx"):
        sim.state_index("crank.fx")


def test_the_kalman_update_is_the_textbook_formula() -> None:
    """nb_kalman (loops) against the Joseph-form update written with numpy's matmul and inv, on a
    random positive definite P (6 × 6) and three measurements: equal to 1e-12 relative."""
    from mbsd_twin.estimation import nb_kalman

    rng = np.random.default_rng(11)
    A = rng.normal(size=(6, 6))
    P = A @ A.T + 0.1 * np.eye(6)
    H, r, nu = rng.normal(size=(3, 6)), np.array([0.1, 0.2, 0.3]), rng.normal(size=3)
    S = H @ P @ H.T + np.diag(r ** 2)
    K = P @ H.T @ np.linalg.inv(S)
    IKH = np.eye(6) - K @ H
    Pn = IKH @ P @ IKH.T + K @ np.diag(r ** 2) @ K.T
    got = nb_kalman.update(P, H, r, nu)
    np.testing.assert_allclose(got[0], Pn, rtol=1e-12, atol=1e-12 * np.abs(Pn).max())
    np.testing.assert_allclose(got[1], K @ nu, rtol=1e-12)
    assert got[2] == pytest.approx(nu @ np.linalg.solve(S, nu), rel=1e-12)
    np.testing.assert_allclose(got[3], np.sqrt(np.diag(S)), rtol=1e-14)
    np.testing.assert_allclose(got[4], np.sqrt(np.diag(K @ S @ K.T)), rtol=1e-12)
    F, Q = np.eye(6) + 0.01 * A, 0.001 * np.eye(6)
    np.testing.assert_allclose(nb_kalman.propagate(F, P, Q, Q), F @ P @ F.T + 2 * Q, rtol=1e-13)


def test_mean_step_keeps_the_impulse() -> None:
    """The Jacobians' single step: the first-order-hold halves of samples 3 and 2.3 over 1 ms become
    one step at their mean 2.65 (the line's impulse / dt); uneven steps are weighted by duration."""
    from mbsd_twin.estimation.holds import mean_step

    (t, values), = mean_step(0.0, interval_steps(0.0, 1e-3, {"m": 3.0}, {"m": 2.3}))
    assert t == 1e-3 and values["m"] == pytest.approx(2.65, abs=1e-14)
    (t, values), = mean_step(1.0, [(1.25, {"m": 4.0}), (2.0, {"m": 0.0})])
    assert t == 2.0 and values["m"] == pytest.approx(1.0, abs=1e-15)
    assert mean_step(0.0, [(1.0, {"m": 5.0})]) == [(1.0, {"m": 5.0})]


def test_a_prediction_step_must_be_a_finite_step_or_zero() -> None:
    """``prediction_step`` below 0 or not finite is refused by the filter's and the twin's checks."""
    from mbsd_twin.twin.config.checks import check_core
    from mbsd_twin.twin.config.sections import CoreConfig

    sim = mt.Simulator(mt.load_mechanism(bundled_slider_crank()))
    for bad in (-1e-3, float("inf"), float("nan")):
        assert any("prediction_step" in p for p in replace(CRANK_FILTER, prediction_step=bad).problems(sim))
        problems: list[str] = []
        check_core(CoreConfig(prediction_step=bad), problems)
        assert any("prediction_step" in p for p in problems)
    assert CRANK_FILTER.problems(sim) == [] and replace(CRANK_FILTER, prediction_step=2e-3).problems(sim) == []


@pytest.mark.parametrize("limit", [1, 1.5])
def test_the_fixed_step_prediction_stops_at_a_work_limit(limit: float) -> None:
    """A sample's two half-millisecond rows take two fixed steps: in a block allowed one (or 1.5:
    the row that would pass the cap is not begun) the sample stops with the block's work used up
    (``WorkLimitExceeded``), the Simulator still at the sample's start; outside a block the same
    sample runs."""
    from mbsd_twin.simulation.work import WorkLimitExceeded, work_limit

    est = StateEstimator(mt.Simulator(mt.load_mechanism(bundled_slider_crank())),
                         replace(CRANK_FILTER, prediction_step=1e-3))
    est.initialize(0.0, {"crank.theta": 0.1}, {"crank.omega": 5.0}, {"motor_torque": 1.0})
    est.sample(interval_steps(0.0, 1e-3, {"motor_torque": 1.0}, {"motor_torque": 1.2}), {"motor_torque": 1.2},
               {"crank.theta": 0.105, "crank.omega": 5.0})
    steps = interval_steps(1e-3, 2e-3, {"motor_torque": 1.2}, {"motor_torque": 1.4})
    meas = {"crank.theta": 0.11, "crank.omega": 5.0}
    with work_limit(limit) as m, pytest.raises(WorkLimitExceeded):
        est.sample(steps, {"motor_torque": 1.4}, meas)
    assert m.exceeded and est.sim.time == 1e-3
    assert est.sample(steps, {"motor_torque": 1.4}, meas) is not None and est.sim.time == 2e-3
