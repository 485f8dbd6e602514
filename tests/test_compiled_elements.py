"""The knife edge and the cam joint on the compiled path (issue #16): the shipped mechanisms that use
them run compiled with default options, agree with the numpy path run at tight tolerance, and keep
what their physics says must hold (no side slip, constant energy, the constraints)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.compiled.compiled_model import Unsupported, pack, profile_code, surface_code
from mbsd_twin.compiled.nb_curves import curve, profile
from mbsd_twin.compiled.nb_solve import accelerations, project, reactions, workspace
from mbsd_twin.model.surfaces import Circle, Graph, Line, Polar, Spline
from mbsd_twin.model.surfaces import Polynomial as PolynomialCurve
from mbsd_twin.physics.outputs import reaction_columns
from mbsd_twin.solvers.dynamics import Dynamics

EX = Path(__file__).resolve().parents[1] / "examples/mechanisms"
TIGHT = mt.SolverOptions(backend="numpy", rtol=1e-10, atol=1e-12)


def _run(mech: mt.Mechanism, opts: mt.SolverOptions, names: list[str], t_end: float = 2.0,
         dt: float = 0.05) -> tuple[str, dict[str, np.ndarray]]:
    sim = mt.Simulator(mech, opts)
    rows = []
    for t in np.linspace(dt, t_end, round(t_end / dt)):
        sim.advance_to(float(t))
        out = sim.outputs()
        rows.append([out[k] for k in names])
    return sim.backend, dict(zip(names, np.array(rows).T, strict=True))


@pytest.mark.parametrize(("name", "spread", "tol"), [("chaplygin_sleigh", 0.3, 1e-12), ("cam_follower", 0.01, 1e-9)])
def test_compiled_evaluation_matches_numpy_at_random_states(name: str, spread: float, tol: float) -> None:
    """Accelerations, multipliers and joint reactions of the packed model against the numpy
    kernels (the independent check: vectorised numpy curves and rows, a dense solve of the whole
    saddle-point system) at states off the constraints, and the projections onto them. The cam's reduced
    solve (nb_joints) is exact; its parameters' accelerations go through a Jacobian of condition
    ~2e3 at these states, hence the looser tolerance. The cam's reduced row's multiplier is 0
    after the solve (moved onto its three rows)."""
    system = mt.compile_mechanism(mt.load_mechanism(EX / f"{name}.toml"))
    dyn = Dynamics(system, mt.SolverOptions())
    model, joints = pack(system, dyn.rows, None)
    ws = workspace(model)
    rng = np.random.default_rng(11)
    n, m = system.n_coord, system.n_constraints
    q0 = dyn.initial_state()[:n]
    for _ in range(5):
        q = q0 + rng.normal(scale=spread, size=q0.shape)
        v = rng.normal(size=q0.shape)
        t = float(rng.uniform(0, 2))
        a, lam, _, _, _, C, Jv, Ct, ok = accelerations(t, q, v, np.zeros(1), model)
        ev = dyn.evaluate(t, q, v, {})
        assert ok
        np.testing.assert_allclose(a, ev.a, rtol=0, atol=tol * max(1.0, np.abs(ev.a).max()))
        np.testing.assert_allclose(lam[:m], ev.lam, rtol=0, atol=1e-12 * max(1.0, np.abs(ev.lam).max()))
        assert not lam[m:].any()
        np.testing.assert_allclose(C[:m], system.constraints(q, t), rtol=0, atol=1e-14)
        y = np.concatenate([q, v, np.zeros(3)])  # projected at t = 0, where q is near the constraints
        assert project(0.0, y, model, 1e-12, ws)
        q_ref, v_ref = dyn.project(0.0, q, v)
        np.testing.assert_allclose(y[:n], q_ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(y[n:2 * n], v_ref, rtol=0, atol=1e-10)
        react = reactions(q, lam, Jv, model[3], joints, system.n_coord)
        cols = reaction_columns(system, q[None], ev.Cq[None], ev.lam[None])
        for k, j in enumerate(system.joints):
            for c in j.components:
                assert react[k, "xyz".index(c[1])] == pytest.approx(cols[f"{j.name}.{c}"][0], rel=1e-12, abs=1e-12)


def test_chaplygin_sleigh_runs_compiled_and_agrees_with_the_numpy_path() -> None:
    """2 s of the shipped sleigh (no gravity, no loads: only the blade's lateral force acts, and it
    does no work because the blade point cannot move along it). Compiled with default options
    against numpy at rtol 1e-10: positions to 1e-6 relative, the blade reactions to 1e-6 of their
    scale. Independently of both: the lateral velocity of the blade point P = r + A(θ)·(−a, 0),
    n·v_P = −sin θ·vx + cos θ·vy − a·ω, stays zero, and the kinetic energy stays at its initial
    ½·m·u² + ½·(I + m·a²)·ω² = 0.5875 J (m = 2 kg, I = 0.05 kg·m², a = 0.15 m, u = 0.4 m/s,
    ω = 3 rad/s: the file's numbers)."""
    mech = mt.load_mechanism(EX / "chaplygin_sleigh.toml")
    names = ["sleigh.x", "sleigh.y", "sleigh.theta", "sleigh.vx", "sleigh.vy", "sleigh.omega", "blade.fx",
             "blade.fy", "energy.kinetic", "energy.constraint_work", "constraints.position_residual"]
    backend, got = _run(mech, mt.SolverOptions(), names)
    ref_backend, ref = _run(mech, TIGHT, names)
    assert (backend, ref_backend) == ("compiled", "numpy")
    for k in ("sleigh.x", "sleigh.y", "sleigh.theta"):
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-6 * np.abs(ref[k]).max(), err_msg=k)
    force_scale = np.hypot(ref["blade.fx"], ref["blade.fy"]).max()
    for k in ("blade.fx", "blade.fy"):
        np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=1e-6 * force_scale, err_msg=k)
    th, a = got["sleigh.theta"], 0.15
    lateral = -np.sin(th) * got["sleigh.vx"] + np.cos(th) * got["sleigh.vy"] - a * got["sleigh.omega"]
    assert np.abs(lateral).max() < 1e-9
    E0 = 0.5 * 2.0 * 0.4**2 + 0.5 * (0.05 + 2.0 * a * a) * 3.0**2
    assert pytest.approx(0.5875) == E0
    np.testing.assert_allclose(got["energy.kinetic"], E0, rtol=1e-9)
    assert np.abs(got["energy.constraint_work"]).max() < 1e-9
    assert got["constraints.position_residual"].max() < 1e-9


def _roller_gap(cam_theta: float, follower: np.ndarray) -> tuple[float, np.ndarray]:
    """Distance from the roller centre (follower frame (0.07, 0) m) to the cam's curve
    r(φ) = 0.05 + 0.008·cos φ + 0.003·cos 2φ (cam frame, the cam turned by ``cam_theta``) by a
    dense grid refined with Newton on the squared distance, minus the roller radius 0.012 m;
    and the unit normal from the contact point towards the roller centre (world axes)."""
    x, y, th = follower
    centre = np.array([x + 0.07 * np.cos(th), y + 0.07 * np.sin(th)])
    c, s = np.cos(cam_theta), np.sin(cam_theta)
    local = np.array([c * centre[0] + s * centre[1], -s * centre[0] + c * centre[1]])

    def point(phi: np.ndarray) -> np.ndarray:
        r = 0.05 + 0.008 * np.cos(phi) + 0.003 * np.cos(2 * phi)
        return np.stack([r * np.cos(phi), r * np.sin(phi)], axis=-1)

    grid = np.linspace(-np.pi, np.pi, 20001)
    phi = grid[np.argmin(np.linalg.norm(point(grid) - local, axis=1))]
    for _ in range(30):  # Newton on d(φ) = |p(φ) − c|², derivatives by central differences
        h = 1e-5
        d = [float(np.sum((point(np.array(phi + k * h)) - local) ** 2)) for k in (-1, 0, 1)]
        phi -= (d[2] - d[0]) / (2 * h) / ((d[2] - 2 * d[1] + d[0]) / h**2)
    gap_vec = local - point(np.array(phi))
    normal = np.array([c * gap_vec[0] - s * gap_vec[1], s * gap_vec[0] + c * gap_vec[1]]) / np.linalg.norm(gap_vec)
    return float(np.linalg.norm(gap_vec) - 0.012), normal


def test_cam_follower_runs_compiled_and_agrees_with_the_numpy_path() -> None:
    """2 s of the shipped cam follower (two cam turns): compiled with default options against numpy
    at rtol 1e-10, positions (bodies and the two surface parameters) to 1e-6 relative and the
    contact reaction to 1e-6 of its scale. Independently of both: the motor holds the cam angle at
    2π·t; the roller touches the cam (the distance from the roller centre to the cam curve, found
    by a grid and Newton here, is the roller radius to 1e-9 m); the contact force on the follower
    points along the common normal (no friction in the joint); the energy balance closes (the
    motor's work is the constraint work, the spring's energy is elastic)."""
    mech = mt.load_mechanism(EX / "cam_follower.toml")
    bodies = ["cam.x", "cam.y", "cam.theta", "follower.x", "follower.y", "follower.theta"]
    names = [*bodies, "contact.fx", "contact.fy", "energy.balance_error", "constraints.position_residual"]
    backend, got = _run(mech, mt.SolverOptions(), names)
    ref_backend, ref = _run(mech, TIGHT, names)
    assert (backend, ref_backend) == ("compiled", "numpy")
    for k in bodies:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-6 * max(np.abs(ref[k]).max(), 1e-3), err_msg=k)
    force_scale = np.hypot(ref["contact.fx"], ref["contact.fy"]).max()
    for k in ("contact.fx", "contact.fy"):
        np.testing.assert_allclose(got[k], ref[k], rtol=0, atol=1e-6 * force_scale, err_msg=k)
    times = np.linspace(0.05, 2.0, 40)
    np.testing.assert_allclose(got["cam.theta"], 2 * np.pi * times, rtol=0, atol=1e-9)
    for k in range(len(times)):
        gap, normal = _roller_gap(got["cam.theta"][k], np.array([got[f"follower.{c}"][k] for c in "xy"]
                                                                + [got["follower.theta"][k]]))
        assert abs(gap) < 1e-9
        force = np.array([got["contact.fx"][k], got["contact.fy"][k]])
        assert abs(force[0] * normal[1] - force[1] * normal[0]) < 1e-6 * force_scale
    assert np.abs(got["energy.balance_error"]).max() < 1e-6
    assert got["constraints.position_residual"].max() < 1e-9


def test_the_surface_parameters_agree_too() -> None:
    """The cam's extra coordinates in the compiled state: the Simulator's state after 0.5 s, all
    eight coordinates and velocities, against the numpy path at tight tolerance."""
    mech = mt.load_mechanism(EX / "cam_follower.toml")
    states = []
    for opts in (mt.SolverOptions(), TIGHT):
        sim = mt.Simulator(mech, opts)
        sim.advance_to(0.5)
        states.append(np.asarray(sim._stepper.y)[:16].copy())
    np.testing.assert_allclose(states[0], states[1], rtol=1e-6, atol=1e-8)


PHI = np.linspace(0.3, 6.0, 9)
CURVES = [Circle(0.02, (0.01, -0.03)), Line((0.1, 0.2), (3.0, 4.0)), PolynomialCurve((0.1, -0.5, 2.0, 3.0)),
          Polar(fourier=(0.05, 0.008, 0.001, 0.003, -0.002)),
          Polar(angles=tuple(PHI), radii=tuple(0.05 + 0.01 * np.cos(PHI))),
          Spline(((0, 0), (1, 0.5), (2, 0.2), (3, 1.0), (4, 0.0))),
          Spline(((1, 0), (0, 1), (-1, 0), (0, -1.2), (0.5, -0.8)), closed=True)]


@pytest.mark.parametrize("surf", CURVES, ids=lambda c: f"{c.kind}{'-spline' if getattr(c, 'angles', ()) else ''}")
def test_compiled_curves_match_the_numpy_surfaces(surf: object) -> None:
    """p and its first three derivatives for every compiled curve kind against ``surfaces``
    (numpy, scipy's splines), across and beyond one turn or the spline's ends (open splines extend
    their end cubics, closed ones and polar splines repeat)."""
    code, par = surface_code(surf)
    s = np.linspace(-7.0, 9.0, 301)
    ref = np.concatenate([np.asarray(x) for x in surf.curve(s)], axis=-1)  # type: ignore[attr-defined]
    got = np.array([curve(code, np.array(par), float(x)) for x in s])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-14 * max(1.0, np.abs(ref).max()))


def test_compiled_table_profile_matches_the_numpy_one() -> None:
    """The clamped cubic table (scipy's spline) inside, at and beyond its ends, where it holds the
    end values with zero derivatives."""
    tab = mt.Table((0.0, 0.5, 1.0, 2.0), (0.0, 1.0, -0.5, 0.3))
    code, par = profile_code(tab)
    t = np.concatenate([np.linspace(-1.0, 3.0, 401), [0.0, 2.0]])
    ref = np.stack(tab.evaluate(t), axis=-1)
    got = np.array([profile(code, np.array(par), float(x)) for x in t])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-13 * np.abs(ref).max())


def test_a_polar_spline_cam_runs_compiled_and_agrees_with_the_numpy_path() -> None:
    """The shipped cam with its Fourier profile replaced by the periodic spline through 24 of its
    radii, and the motor's constant speed by a table of angles (2π·t through points 25 ms apart),
    0.5 s: compiled by default, and within 1e-6 of the numpy path at rtol 1e-10. A cam curve given
    as a Python function still falls back to numpy."""
    mech = mt.load_mechanism(EX / "cam_follower.toml")
    phi = np.linspace(0.0, 2 * np.pi, 24, endpoint=False)
    r = 0.05 + 0.008 * np.cos(phi) + 0.003 * np.cos(2 * phi)
    polar = Polar(angles=tuple(phi), radii=tuple(r))
    tt = np.linspace(-0.2, 0.8, 41)
    motor = mt.Table(tuple(tt), tuple(2 * np.pi * tt))
    joints = tuple(dataclasses.replace(j, surfaces=(polar, j.surfaces[1])) if j.type == "cam" else j
                   for j in mech.joints)
    drivers = tuple(dataclasses.replace(d, profile=motor) for d in mech.drivers)
    spline = dataclasses.replace(mech, joints=joints, drivers=drivers)
    names = ["cam.theta", "follower.x", "follower.y", "follower.theta", "contact.fx", "contact.fy"]
    backend, got = _run(spline, mt.SolverOptions(), names, t_end=0.5)
    ref_backend, ref = _run(spline, TIGHT, names, t_end=0.5)
    assert (backend, ref_backend) == ("compiled", "numpy")
    for k in names:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-6 * np.abs(ref[k]).max(), err_msg=k)
    graph = Graph(lambda x: (0.1 * x * x, 0.2 * x, 0.2 + 0 * x, 0 * x))
    joints = tuple(dataclasses.replace(j, surfaces=(graph, j.surfaces[1])) if j.type == "cam" else j
                   for j in mech.joints)
    with pytest.raises(Unsupported, match="graph cam surface"):
        pack(mt.compile_mechanism(dataclasses.replace(mech, joints=joints)), np.arange(8), None)
