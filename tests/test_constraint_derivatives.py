"""Analytic constraint derivatives of every joint, driver and profile kind against finite differences.

For random (seeded) q, v and t:
  * Cq  against central differences of C in q,
  * Ct  against central differences of C in t,
  * γ   against the identity γ = −d/dt(Cq·v + Ct) along the path q(s) = q + v·s, t(s) = t + s,
        i.e. γ ≈ −[(Cq·v + Ct)(q + v h, t + h) − (Cq·v + Ct)(q − v h, t − h)] / (2h).
The mechanisms are small and need not assemble: the constraint functions are evaluated anywhere.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import mbsd_twin as mt

H = 1e-6
RTOL = 1e-7
N_CONFIGS = 5


def fn_profile(t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """f = sin 2t + 0.3 t³ with its exact derivatives."""
    return np.sin(2 * t) + 0.3 * t**3, 2 * np.cos(2 * t) + 0.9 * t**2, -4 * np.sin(2 * t) + 1.8 * t


PROFILES: dict[str, mt.Profile] = {
    "constant_speed": mt.ConstantSpeed(speed=1.3, start=0.2),
    "polynomial": mt.Polynomial((0.1, -0.4, 0.7, 0.2)),
    "harmonic": mt.Harmonic(amplitude=0.3, frequency=1.7, phase=0.4, offset=0.1),
    "table": mt.Table((-0.5, 0.0, 0.3, 0.7, 1.2, 1.6), (0.2, 0.0, 0.5, 0.2, 0.9, 1.0)),
    "function": mt.FunctionProfile(fn_profile),
}


def two_bodies(name: str) -> mt.MechanismBuilder:
    b = mt.MechanismBuilder(name)
    b.body("a", 1.0, 0.1, (0.1, 0.05), (0.3, -0.2), 0.4)
    b.body("b", 2.0, 0.2, (-0.05, 0.1), (1.1, 0.5), -0.7)
    return b


JOINTS: dict[str, Callable[[mt.MechanismBuilder], object]] = {
    "revolute": lambda b: b.revolute("j", "a", "b", (0.3, -0.2), (-0.1, 0.4)),
    "revolute_ground_first": lambda b: b.revolute("j", "ground", "a", (0.4, -0.3), (0.2, 0.1)),
    "revolute_ground_second": lambda b: b.revolute("j", "a", "ground", (0.2, 0.1), (0.4, -0.3)),
    "prismatic": lambda b: b.prismatic("j", "a", "b", (0.2, 0.1), (-0.3, 0.25), axis=(0.6, 0.8)),
    "prismatic_ground": lambda b: b.prismatic("j", "ground", "b", (0.1, -0.2), (0.2, 0.0),
                                              axis=(1.0, 1.0)),
    "prismatic_angle": lambda b: b.prismatic("j", "a", "b", (0.0, 0.0), (0.1, 0.1), axis=(1.0, 0.0),
                                             angle=0.3),
    "point_on_line_rotating": lambda b: b.point_on_line("j", "a", "b", (0.15, -0.1), (0.3, 0.2),
                                                        axis=(0.3, -1.0)),
    "point_on_line_ground": lambda b: b.point_on_line("j", "ground", "b", (0.0, 0.5), (0.3, 0.2),
                                                      axis=(0.0, 1.0)),
    "gear": lambda b: b.gear("j", "a", "b", ratio=2.0),
    "gear_negative_offset": lambda b: b.gear("j", "a", "b", ratio=-0.75, offset=0.3),
    "gear_external_carrier": lambda b: b.body("c", 0.5, 0.05, position=(0.2, 0.1), angle=1.1).gear(
        "j", "a", "b", ratio=1.6, mesh="external", carrier="c"),
    "gear_internal_carrier": lambda b: b.body("c", 0.5, 0.05, position=(0.2, 0.1), angle=-0.6).gear(
        "j", "a", "b", ratio=2.5, offset=0.2, mesh="internal", carrier="c"),
    "fixed": lambda b: b.fixed("j", "a", "b", (0.2, 0.1), (-0.1, 0.3)),
    "fixed_ground": lambda b: b.fixed("j", "ground", "b", (0.5, 0.5), (0.0, 0.1), angle=0.2),
}

DRIVERS: dict[str, Callable[[mt.MechanismBuilder, mt.Profile], object]] = {
    "angle": lambda b, p: b.angle_driver("d", "a", p),
    "coordinate_x": lambda b, p: b.coordinate_driver("d", "a", "x", p, point=(0.2, -0.3)),
    "coordinate_y": lambda b, p: b.coordinate_driver("d", "b", "y", p, point=(-0.15, 0.25)),
    "distance": lambda b, p: b.distance_driver("d", "a", "b", (0.1, 0.2), (-0.2, 0.05), p),
    "distance_ground": lambda b, p: b.distance_driver("d", "ground", "a", (0.5, -0.4), (0.1, 0.0), p),
}


def joint_case(kind: str) -> mt.Mechanism:
    b = two_bodies(f"joint_{kind}")
    JOINTS[kind](b)
    return b.build()


def driver_case(kind: str, profile: str) -> mt.Mechanism:
    b = two_bodies(f"driver_{kind}_{profile}")
    DRIVERS[kind](b, PROFILES[profile])
    return b.build()


CASES = [pytest.param(lambda k=k: joint_case(k), id=f"joint-{k}") for k in JOINTS]
CASES += [pytest.param(lambda k=k, p=p: driver_case(k, p), id=f"driver-{k}-{p}")
          for k in DRIVERS for p in PROFILES]


def random_states(system: mt.System, seed: int) -> list[tuple[np.ndarray, np.ndarray, float]]:
    rng = np.random.default_rng(seed)
    n = system.n_coord
    return [(system.q0 + rng.normal(0.0, 0.5, n), rng.normal(0.0, 1.0, n), float(rng.uniform(0.05, 0.95)))
            for _ in range(N_CONFIGS)]


def close(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=RTOL * scale, err_msg=what)


@pytest.mark.parametrize("make", CASES)
def test_jacobian_ct_gamma_against_finite_differences(make: Callable[[], mt.Mechanism]) -> None:
    system = mt.compile_mechanism(make())
    n = system.n_coord
    m = len(system.constraint_names)
    assert m >= 1
    for k, (q, v, t) in enumerate(random_states(system, seed=12345)):
        C = system.constraints(q, t)
        Cq = system.jacobian(q, t)
        assert C.shape == (m,) and Cq.shape == (m, n)
        fd_q = np.column_stack([(system.constraints(q + H * e, t) - system.constraints(q - H * e, t))
                                / (2 * H) for e in np.eye(n)])
        close(Cq, fd_q, f"Cq, config {k}")
        fd_t = (system.constraints(q, t + H) - system.constraints(q, t - H)) / (2 * H)
        close(system.ct(q, t), fd_t, f"Ct, config {k}")

        def rate(s: float, q=q, v=v, t=t) -> np.ndarray:
            qs, ts = q + v * s, t + s
            return system.jacobian(qs, ts) @ v + system.ct(qs, ts)

        close(system.gamma(q, v, t), -(rate(H) - rate(-H)) / (2 * H), f"gamma, config {k}")


BATCH_CASES = ("joint-prismatic", "joint-point_on_line_rotating", "driver-distance_ground-function")


@pytest.mark.parametrize("make", [c for c in CASES if c.id in BATCH_CASES])
def test_batched_evaluation_matches_single(make: Callable[[], mt.Mechanism]) -> None:
    system = mt.compile_mechanism(make())
    states = random_states(system, seed=7)
    Q = np.array([q for q, _, _ in states])
    T = np.array([t for _, _, t in states])
    Cb, Jb = system.constraints(Q, T), system.jacobian(Q, T)
    for k, (q, _, t) in enumerate(states):
        np.testing.assert_allclose(Cb[k], system.constraints(q, t), rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(Jb[k], system.jacobian(q, t), rtol=1e-14, atol=1e-14)


def test_coordinate_names_and_constraint_rows() -> None:
    system = mt.compile_mechanism(driver_case("distance", "table"))
    assert system.coordinate_names == ["a.x", "a.y", "a.theta", "b.x", "b.y", "b.theta"]
    assert system.n_coord == 6
    assert len(system.constraint_names) == 1 and system.constraint_names[0].startswith("d")
