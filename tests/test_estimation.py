"""The estimation package against independent derivations: input holds (exact impulses), the
extended Kalman filter against a linear Kalman filter written out with the closed-form transition
matrix (mass-spring-damper), parameter estimation of a known hidden stiffness, and the CUSUM's
false-alarm rate and detection delay against Siegmund's approximation and a simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import expm

import mbsd_twin as mt
from mbsd_twin.estimation.change import ChangeDetector, Cusum, arl0, threshold
from mbsd_twin.estimation.ekf import PARAM_WRITE, Augment, FilterConfig, StateEstimator, speed_of
from mbsd_twin.estimation.holds import interval_steps

MSD = "examples/mechanisms/mass_spring_damper.toml"
M, K, C = 2.0, 200.0, 4.0  # the file's block mass, spring stiffness and damping


def test_first_order_hold_keeps_impulse_and_first_moment_of_the_line() -> None:
    """Between samples u0 = 3 and u1 = 2.3 over [0, 0.001] s the line's impulse is ∫u = 2.65e-3 and
    its first moment about the midpoint ∫u·(t − 0.0005) = (u1 − u0)·dt²/12; the two half steps
    keep both. The zero-order hold is one step at u0; an unknown hold is refused by name."""
    steps = interval_steps(0.0, 1e-3, {"m": 3.0}, {"m": 2.3})
    (t1, a), (t2, b) = steps
    assert (t1, t2) == (0.5e-3, 1e-3)
    assert 0.5e-3 * (a["m"] + b["m"]) == pytest.approx(2.65e-3, abs=1e-15)
    moment = a["m"] * -(0.5e-3 ** 2) / 2 + b["m"] * (0.5e-3 ** 2) / 2
    assert moment == pytest.approx((2.3 - 3.0) * 1e-6 / 12, abs=1e-18)
    assert interval_steps(0.0, 1e-3, {"m": 3.0}, {"m": 2.3}, {"m": "zoh"}) == [(1e-3, {"m": 3.0})]
    with pytest.raises(ValueError, match="'cubic'"):
        interval_steps(0.0, 1e-3, {"m": 3.0}, {"m": 2.3}, {"m": "cubic"})


def test_speed_names() -> None:
    assert speed_of("crank.theta") == "crank.omega" and speed_of("piston.x") == "piston.vx"
    with pytest.raises(ValueError, match="crank.fx"):
        speed_of("crank.fx")


def _truth(stiffness: float, n: int, h: float) -> np.ndarray:
    """Block position at t = k·h of the file's mass-spring-damper with another stiffness
    (closed form of the damped oscillator: u(0) = 0.1 m, u'(0) = 0)."""
    wn, z = math.sqrt(stiffness / M), C / (2.0 * math.sqrt(stiffness * M))
    wd = wn * math.sqrt(1.0 - z * z)
    t = h * np.arange(n)
    return 0.5 + 0.1 * np.exp(-z * wn * t) * (np.cos(wd * t) + z * wn / wd * np.sin(wd * t))


def _filter(augment: tuple[Augment, ...] = (), q: float = 0.5, sigma: float = 1e-3) -> StateEstimator:
    sim = mt.Simulator(mt.load_mechanism(MSD), mt.SolverOptions(rtol=1e-10, atol=1e-12))
    return StateEstimator(sim, FilterConfig(("block.x",), {"block.x": sigma}, q, augment,
                                            initial_sigma=(0.01, 0.1)))


def test_ekf_equals_the_linear_kalman_filter() -> None:
    """On a linear mechanism the filter is the linear Kalman filter: x and P after 300 steps equal
    those of the textbook recursion with Φ = expm(A·h) to the finite-difference accuracy."""
    h, n, sig, q = 1e-3, 300, 1e-3, 0.5
    y = _truth(K, n + 1, h) + np.random.default_rng(0).normal(0.0, sig, n + 1)
    est = _filter(q=q, sigma=sig)
    est.initialize(0.0, {"block.x": 0.6}, {"block.vx": 0.0}, {})
    Phi = expm(np.array([[0.0, 1.0], [-K / M, -C / M]]) * h)
    Q = q * q * np.array([[h ** 3 / 3, h ** 2 / 2], [h ** 2 / 2, h]])
    x, P, H = np.array([0.6, 0.0]), est.P.copy(), np.array([[1.0, 0.0]])
    nis = []
    for k in range(1, n + 1):
        est.predict([(k * h, {})], {})
        inn = est.update({"block.x": float(y[k])})
        assert inn is not None
        nis.append(inn.nis)
        x, P = Phi @ (x - [0.5, 0.0]) + [0.5, 0.0], Phi @ P @ Phi.T + Q
        S = H @ P @ H.T + sig * sig
        Kg = P @ H.T / S
        x = x + (Kg * (y[k] - x[0])).ravel()
        P = (np.eye(2) - Kg @ H) @ P
    assert abs(est.x[0] - x[0]) < 1e-9 and abs(est.x[1] - x[1]) < 1e-7, (est.x, x)
    np.testing.assert_allclose(est.P, P, rtol=1e-5)
    assert 0.7 < np.mean(nis) < 1.3  # χ²(300)/300 lies in [0.85, 1.17] with 99.4 %


def test_hidden_stiffness_is_estimated_within_its_sigma() -> None:
    """The spring is 20 % stiffer than the file says: the augmented stiffness converges to the
    truth, and the reported σ covers the error."""
    h, n, sig = 1e-3, 1500, 1e-3
    y = _truth(1.2 * K, n + 1, h) + np.random.default_rng(1).normal(0.0, sig, n + 1)
    est = _filter((Augment("spring.stiffness", 50.0),), q=0.05, sigma=sig)
    est.initialize(0.0, {"block.x": 0.6}, {"block.vx": 0.0}, {})
    for k in range(1, n + 1):
        est.predict([(k * h, {})], {})
        est.update({"block.x": float(y[k])})
    k_hat, k_sd = est.estimates()["spring.stiffness"]
    assert abs(k_hat - 1.2 * K) < 3.0 * k_sd and k_sd < 0.02 * K and abs(k_hat / (1.2 * K) - 1) < 0.01
    in_model = next(ld for ld in est.sim.mechanism.loads if ld.name == "spring").stiffness
    assert abs(in_model - k_hat) <= PARAM_WRITE * k_sd  # written back once it moves by that much


def test_configuration_problems_are_named() -> None:
    sim = mt.Simulator(mt.load_mechanism(MSD))
    cfg = FilterConfig(("block.theta_wrong",), {"block.fx": 1.0, "block.x": -1.0},
                       augment=(Augment("nope.bias", 1.0), Augment("block.colour", 1.0)))
    with pytest.raises(ValueError) as exc:
        StateEstimator(sim, cfg)
    text = str(exc.value)
    for part in ("block.theta_wrong", "block.fx", "σ of 'block.x'", "no input port 'nope'", "block.colour"):
        assert part in text


def test_cusum_false_alarm_rate_matches_its_tuning() -> None:
    """In-control run length: simulated mean within 15 % of Siegmund's approximation (itself
    accurate to a few per cent for these k, h)."""
    k, target = 0.5, 400.0  # samples
    h = threshold(target, 1.0, 2 * k)
    assert arl0(h, k) == pytest.approx(target, rel=1e-9)
    rng = np.random.default_rng(2)
    runs = []
    test = Cusum("x", k, h)
    t = 0
    for e in rng.normal(size=400_000):
        t += 1
        if test.update(float(t), float(e), float(e)) is not None:
            runs.append(t)
            t = 0
    assert abs(np.mean(runs) / target - 1.0) < 0.15


def test_cusum_names_onset_and_size_of_a_step() -> None:
    det = ChangeDetector(["theta"], mtbfa=3600.0, rate=1000.0, shift=1.0)
    rng = np.random.default_rng(3)
    alarms = []
    for i in range(3000):
        e = rng.normal() + (2.0 if i >= 2000 else 0.0)  # a 2 σ step at sample 2000
        alarms += det.update(i * 1e-3, {"theta": (e, 1e-3 * e)})
    assert alarms and all(a["detected"] >= 2.0 for a in alarms)  # the sum restarts after each alarm
    a = alarms[0]
    delay = a["detected"] - 2.0
    b = det.h + 1.166
    assert 0 <= delay < 3 * b / (2.0 - det.k) * 1e-3  # expected about b/(δ − k) samples
    assert abs(a["onset"] - 2.0) < 0.01 and a["direction"] == "up"
    assert a["mean"] == pytest.approx(2e-3, rel=0.35)


def test_two_degrees_of_freedom_chaotic_double_pendulum() -> None:
    """Both bar angles measured (σ 1 mrad) on the chaotic double pendulum, the filter started 3σ
    off: the estimates track the truth (an independent tight-tolerance run) to a fraction of the
    noise, consistently with their σ, while an open-loop run from the same start drifts away."""
    mech = mt.load_mechanism("examples/mechanisms/double_pendulum.toml")
    h, n, sig = 1e-3, 2000, 1e-3
    truth = mt.Simulator(mech, mt.SolverOptions(rtol=1e-11, atol=1e-13))
    true = np.empty((n + 1, 2))
    for k in range(n + 1):
        truth.advance_to(k * h)
        true[k] = truth.get_output("upper.theta"), truth.get_output("lower.theta")
    y = true + np.random.default_rng(4).normal(0.0, sig, true.shape)
    coords = ("upper.theta", "lower.theta")
    est = StateEstimator(mt.Simulator(mech), FilterConfig(coords, {c: sig for c in coords}, accel_noise=0.05))
    est.initialize(0.0, {"upper.theta": 3e-3, "lower.theta": -3e-3}, {}, {})
    open_loop = mt.Simulator(mech)
    open_loop.set_configuration({"upper.theta": 3e-3, "lower.theta": -3e-3}, {})
    open_loop.advance_to(n * h)
    err, sd, nis = [], [], []
    for k in range(1, n + 1):
        est.predict([(k * h, {})], {})
        inn = est.update({"upper.theta": float(y[k, 0]), "lower.theta": float(y[k, 1])})
        assert inn is not None
        if k > n // 2:
            err.append(est.x[:2] - true[k])
            sd.append(est.sd()[:2])
            nis.append(inn.nis)
    e, s = np.array(err), np.array(sd)
    assert np.sqrt(np.mean(e ** 2)) < 0.5 * sig
    assert np.mean((e / s) ** 2) < 2.0  # ≈ 1 for a consistent filter
    assert 1.7 < np.mean(nis) < 2.3  # χ²(2000)/1000 is in [1.88, 2.13] with 99.4 %
    assert abs(open_loop.get_output("lower.theta") - true[-1, 1]) > 4 * sig  # 4.9 mrad after 2 s
