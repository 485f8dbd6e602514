"""Penalty contact on the compiled path (issue #16): the nearest-point search against the numpy
``contact.nearest`` and against points whose nearest profile point is known by construction, the
packed forces, energy terms and outputs against the numpy path (which stays the independent
reference) at random states, the shipped terrain wheels against the numpy path and the closed forms
of their file, the energy balance, and bit-identical state save/restore.

The helpers (contact loads, the two-body geometries) come from ``test_contact``, the curves from
``test_compiled_elements``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_compiled_elements import CURVES, EX
from test_contact import GEOMETRIES, two_body_case

import mbsd_twin as mt
from mbsd_twin.compiled.compiled_model import Unsupported, contact_profile, pack
from mbsd_twin.compiled.nb_contact import nearest as nb_nearest
from mbsd_twin.compiled.nb_solve import accelerations
from mbsd_twin.model.model import Polyline
from mbsd_twin.model.surfaces import Spline
from mbsd_twin.physics.contact import nearest
from mbsd_twin.solvers.dynamics import Dynamics

WHEELS = ("terrain_wheel", "terrain_wheel_polygonal")
TERRAIN = mt.load_mechanism(EX / "terrain_wheel.toml").loads[-1].contact.surface
PROFILES = [*CURVES, TERRAIN, Polyline(((-1.0, 0.2), (-0.3, 0.0), (0.2, 0.05), (0.25, 0.3), (1.0, -0.1)))]


def _compiled_nearest(profile: object, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    code, par, seg, size, blk = contact_profile(profile)
    args = (code, np.array(par, float), np.ascontiguousarray(seg.ravel()), np.ascontiguousarray(blk.ravel()), size)
    got = np.array([nb_nearest(*args, float(x), float(y)) for x, y in points])
    return got[:, :2], got[:, 2:]


def _near_points(profile: object, rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k points p(s) + r·n(s) with |r| below a tenth of the curve's size and within its smallest
    radius of curvature (so that p(s) is their nearest point), and those p(s)."""
    s_all = np.linspace(0.0, 2 * math.pi, 2001)
    if isinstance(profile, Spline):
        s_all = np.linspace(0.05, 0.95, 2001) * profile.length
    elif profile.kind in ("line", "polynomial"):
        s_all = np.linspace(-0.8, 0.8, 2001)
    p, d1, d2, _ = profile.curve(s_all)
    speed = np.hypot(*d1.T)
    curvature = np.abs(d1[:, 0] * d2[:, 1] - d1[:, 1] * d2[:, 0]) / speed**3
    size = np.ptp(p, axis=0).max()
    band = 0.5 * min(0.2 * size, 1.0 / max(curvature.max(), 1e-9))
    i = rng.integers(0, len(s_all), k)
    n = np.stack([-d1[i, 1], d1[i, 0]], axis=1) / speed[i, None]
    return p[i] + rng.uniform(-band, band, (k, 1)) * n, p[i]


@pytest.mark.parametrize("profile", PROFILES, ids=lambda c: f"{c.kind}{'-closed' if getattr(c, 'closed', 0) else ''}"
                         f"{'-table' if getattr(c, 'angles', ()) else ''}{len(getattr(c, 'points', ()))}")
def test_compiled_nearest_point_is_the_global_one(profile: object) -> None:
    """Near the profile (points built as p(s) + r·n(s), whose nearest point is p(s)) the compiled
    search returns p(s) and the numpy path's point and normal; anywhere in a box around it, it is
    never farther than the numpy path's sampled search, and agrees with it (both global) except
    where two distant profile points are almost equally near."""
    rng = np.random.default_rng(5)
    if not isinstance(profile, Polyline):
        x, foot = _near_points(profile, rng, 300)
        got_f, got_n = _compiled_nearest(profile, x)
        ref_f, ref_n = nearest(profile, x)
        scale = np.ptp(foot, axis=0).max()
        np.testing.assert_allclose(got_f, foot, rtol=0, atol=1e-9 * scale)
        np.testing.assert_allclose(got_f, ref_f, rtol=0, atol=1e-12 * scale)
        np.testing.assert_allclose(got_n, ref_n, rtol=0, atol=1e-10)
    pts = profile.points if isinstance(profile, Polyline) else nearest(profile, _near_points(profile, rng, 50)[0])[0]
    lo, hi = np.min(pts, axis=0), np.max(pts, axis=0)
    x = rng.uniform(lo - 0.3 * (hi - lo), hi + 0.3 * (hi - lo), (1000, 2))
    got_f, got_n = _compiled_nearest(profile, x)
    ref_f, ref_n = nearest(profile, x)
    got_d, ref_d = np.hypot(*(x - got_f).T), np.hypot(*(x - ref_f).T)
    assert np.all(got_d <= ref_d + 1e-12 * np.ptp(pts, axis=0).max())
    same = np.hypot(*(got_f - ref_f).T) < 1e-9
    assert same.mean() >= (1.0 if isinstance(profile, Polyline) else 0.99)
    np.testing.assert_allclose(got_n[same], ref_n[same], rtol=0, atol=1e-9)


def _contact_only(mech: mt.Mechanism, random_state: int) -> tuple[mt.System, Dynamics, tuple, np.random.Generator]:
    system = mt.compile_mechanism(mech)
    dyn = Dynamics(system, mt.SolverOptions())
    return system, dyn, pack(system, dyn.rows, None)[0], np.random.default_rng(random_state)


@pytest.mark.parametrize("case", [*(k for k in GEOMETRIES if "graph" not in k), *WHEELS])
def test_packed_contact_matches_numpy_at_random_states(case: str) -> None:
    """Accelerations, multipliers, elastic energy and dissipated power of the packed model against
    the numpy path at random states (bodies moving, the profile on ground or on a body; circle and
    polygon probes; line, polynomial, spline and polyline profiles), and every Simulator output —
    the contact's four included — at the same states."""
    mech = mt.load_mechanism(EX / f"{case}.toml") if case in WHEELS else two_body_case(*GEOMETRIES[case])
    system, dyn, model, rng = _contact_only(mech, 3)
    n = system.n_coord
    q0 = dyn.initial_state()[:n]
    sims = [mt.Simulator(mech), mt.Simulator(mech, mt.SolverOptions(backend="numpy"))]
    assert [s.backend for s in sims] == ["compiled", "numpy"]
    touching = 0
    for _ in range(16):
        q, v = q0 + rng.normal(0.0, 0.01, n), rng.normal(0.0, 0.5, n)
        a, lam, el, di, _, _, _, _, ok = accelerations(0.1, q, v, np.zeros(1), model)
        ev = dyn.evaluate(0.1, q, v, {})
        tot = system.forces_and_power(q[None], v[None], np.array([0.1]))
        assert ok
        np.testing.assert_allclose(a, ev.a, rtol=0, atol=1e-12 * max(1.0, np.abs(ev.a).max()))
        lam_scale = max(1.0, np.abs(ev.lam).max(initial=0.0))
        np.testing.assert_allclose(lam[:len(ev.lam)], ev.lam, rtol=0, atol=1e-11 * lam_scale)
        assert el == pytest.approx(tot.elastic[0], rel=1e-12, abs=1e-15)
        assert di == pytest.approx(tot.dissipation[0], rel=1e-12, abs=1e-12)
        touching += el > 0.0
        outs = []
        for sim in sims:
            sim._restart_at(0.1, q, v)
            outs.append(sim.output_vector())
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-10, atol=1e-10 * np.abs(outs[1]).max())
    assert touching >= 3


def test_a_graph_profile_stays_on_the_numpy_path() -> None:
    spec, first = GEOMETRIES["circle-graph_function"]
    system = mt.compile_mechanism(two_body_case(spec, first))
    with pytest.raises(Unsupported, match="graph contact profile"):
        pack(system, np.arange(0), None)
    assert mt.Simulator(two_body_case(spec, first)).backend == "numpy"


def _trace(mech: mt.Mechanism, opts: mt.SolverOptions, names: list[str], t_end: float,
           dt: float = 1e-3) -> dict[str, np.ndarray]:
    sim = mt.Simulator(mech, opts)
    rows = [[sim.outputs()[k] for k in names]]
    for k in range(1, round(t_end / dt) + 1):
        sim.advance_to(k * dt)
        out = sim.outputs()
        rows.append([out[k] for k in names])
    return dict(zip(names, np.array(rows).T, strict=True))


POSITIONS = ["wheel.x", "wheel.y", "wheel.theta", "body.x", "body.y"]
CONTACT = ["tyre.normal_force", "tyre.friction_force", "tyre.penetration", "tyre.slip_velocity"]


@pytest.mark.parametrize("name", WHEELS)
def test_terrain_wheel_compiled_agrees_with_the_numpy_path(name: str) -> None:
    """1 s at 1 ms steps, default options on both paths (the numpy path is the independent
    implementation; its own error at rtol 1e-8 is ~1e-8): positions to 1e-6 of their range of
    motion, the contact outputs to 1e-4 of their scale (penetration: 1e-4 of its peak)."""
    mech = mt.load_mechanism(EX / f"{name}.toml")
    got = _trace(mech, mt.SolverOptions(), POSITIONS + CONTACT, 1.0)
    ref = _trace(mech, mt.SolverOptions(backend="numpy"), POSITIONS + CONTACT, 1.0)
    for k in POSITIONS:
        span = max(np.ptp(ref[k]), 1e-3)
        np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=1e-6 * span, err_msg=k)
    for k in CONTACT:
        np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=1e-4 * np.abs(ref[k]).max(), err_msg=k)


def test_terrain_wheel_flat_start_closed_forms() -> None:
    """The file's closed forms: static penetration δ0 = (m_total·g/K)^(2/3) = 7.02e-3 m (the file
    places the hub 0.3 − 0.007023 m above the flat terrain) with Fn = m_total·g; then rolling with a
    steady creep slip on the flat, a = τ / (R·(m_w + m_b) + I/R) = 60 / 19.5 = 3.0769 m/s², still
    Fn = m_total·g, and the friction force that drives it, (m_w + m_b)·a = τ/R − I·a/R² (the
    wheel's moment balance I·α = −τ + R·f with α = −a/R; the body's drive reaction goes to its
    upright driver)."""
    mech = mt.load_mechanism(EX / "terrain_wheel.toml")
    m, g, K, R, inertia, tau = 60.0, 9.81, 1e6, 0.3, 0.45, 60.0
    delta0 = (m * g / K) ** (2 / 3)
    assert delta0 == pytest.approx(7.02e-3, abs=5e-6)
    sim = mt.Simulator(mech)
    assert sim.backend == "compiled"
    out = sim.outputs()
    assert out["tyre.penetration"] == pytest.approx(0.3 - 0.292977, abs=1e-9)  # the spline: flat to ~1e-11
    assert out["tyre.penetration"] == pytest.approx(delta0, rel=1e-4)
    assert out["tyre.normal_force"] == pytest.approx(m * g, rel=2e-4)
    a = tau / (R * m + inertia / R)
    assert a == pytest.approx(3.0769, abs=1e-4)
    sim.advance_to(0.3)  # the hub at x ≈ 0.14 m: still on the flat (the bump starts at 0.6 m)
    out = sim.outputs()
    assert out["wheel.ax"] == pytest.approx(a, rel=1e-4)
    assert out["body.ax"] == pytest.approx(a, rel=1e-4)
    assert out["tyre.normal_force"] == pytest.approx(m * g, rel=1e-4)
    assert out["tyre.penetration"] == pytest.approx(delta0, rel=1e-4)
    assert out["tyre.friction_force"] == pytest.approx(tau / R - inertia * a / R**2, rel=1e-4)


@pytest.mark.parametrize(("name", "opts", "bound"), [
    ("terrain_wheel", mt.SolverOptions(), 1e-9),
    ("terrain_wheel_polygonal", mt.SolverOptions(), 1.5e-6),
    ("terrain_wheel_polygonal", mt.SolverOptions(max_step=2e-5), 1e-9)])
def test_terrain_wheel_energy_balance(name: str, opts: mt.SolverOptions, bound: float) -> None:
    """2 s compiled at 1 ms steps: the largest |energy.balance_error| relative to the peak total
    energy. Default options: measured 6e-11 (round wheel) and 8.2e-7 (octagon, whose vertex
    impacts make the dissipated power kink: without the dissipated energy in the step-size
    control, ``error_norm.controlled_integrals``, it was 1.4e-6; 6.2e-7 with another rounding of
    the same sums — the bound leaves room for a step sequence that differs by rounding). With
    20 µs steps the octagon's closes to 1e-9: the contact's force, elastic energy and dissipated
    power are consistent."""
    names = ["energy.balance_error", "energy.total", "energy.dissipated"]
    got = _trace(mt.load_mechanism(EX / f"{name}.toml"), opts, names, 2.0)
    assert got["energy.dissipated"][-1] > 10.0  # the contact did dissipate
    assert np.abs(got["energy.balance_error"]).max() <= bound * np.abs(got["energy.total"]).max()


def test_state_save_and_restore_are_bit_identical_with_contact() -> None:
    """The octagonal wheel: continuing from get_state (in a new Simulator) or from snapshot/restore
    gives the same outputs, bit for bit, as running on."""
    mech = mt.load_mechanism(EX / "terrain_wheel_polygonal.toml")
    sim = mt.Simulator(mech)
    assert sim.backend == "compiled"
    sim.advance_to(0.3)
    blob, snap = sim.get_state(), sim.snapshot()

    def run_on(s: mt.Simulator) -> np.ndarray:
        rows = []
        for k in range(1, 301):
            s.advance_to(0.3 + k * 1e-3)
            rows.append(s.output_vector().copy())
        return np.array(rows)

    first = run_on(sim)
    other = mt.Simulator(mech)
    other.set_state(blob)
    again = run_on(other)
    sim.restore(snap)
    assert np.array_equal(first, again) and np.array_equal(first, run_on(sim))


@pytest.mark.parametrize(("case", "first"), [("circle-polyline_on_body", "plate"), ("polygon-polyline", "plate")])
def test_contact_between_two_moving_bodies_agrees_with_numpy(case: str, first: str) -> None:
    """Two free bodies pushed apart by their contact (a polyline on the plate against a circle or
    a polygon on the wheel, damping and friction on, no gravity): 0.2 s compiled against the numpy
    path at tight tolerance, positions to 1e-6 of their range and the contact outputs to 1e-5 of
    their scale."""
    mech = two_body_case(GEOMETRIES[case][0], first)
    positions = [f"{b}.{c}" for b in ("plate", "wheel") for c in ("x", "y", "theta")]
    contact = ["c.normal_force", "c.friction_force", "c.penetration"]
    got = _trace(mech, mt.SolverOptions(), positions + contact, 0.2)
    ref = _trace(mech, mt.SolverOptions(backend="numpy", rtol=1e-10, atol=1e-12), positions + contact, 0.2)
    assert got["c.normal_force"][0] > 0.0 and np.ptp(got["wheel.x"]) + np.ptp(got["wheel.y"]) > 1e-3
    for k in positions:
        np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=1e-6 * max(np.ptp(ref[k]), 1e-3), err_msg=k)
    for k in contact:
        np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=1e-5 * np.abs(ref[k]).max(), err_msg=k)
