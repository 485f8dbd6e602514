"""The ODE form of a mechanism by coordinate partitioning (issue #34's foundation): integrated by
scipy's own integrators and compared with the native Simulator at tight tolerance; the partition's
conditioning against the four-bar's closed-form velocities; a re-partition at a crank-rocker's dead
point; directional derivatives against central differences of the whole map."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.integrate import DOP853, solve_ivp

import mbsd_twin as mt
from mbsd_twin.errors import AssemblyError
from mbsd_twin.simulation.ode_form import OdeForm  # also mbsd_twin.OdeForm
from mbsd_twin.solvers import partition
from mbsd_twin.solvers.newton import length_scale

ROOT = Path(__file__).resolve().parents[1]
MECHS = ROOT / "examples" / "mechanisms"
REF = mt.SolverOptions(rtol=1e-12, atol=1e-14)  # the native reference
NUMPY = mt.SolverOptions(backend="numpy")  # the ODE form's Simulator: only its model and state are used
COMPILED = mt.SolverOptions()  # the compiled kernels' accelerations and constrained state where they apply
TIMES = np.linspace(0.0, 2.0, 21)  # the crank-rocker's comparison times


def load(name: str) -> mt.Mechanism:
    return mt.load_mechanism(MECHS / name)


def rocker_first() -> mt.Mechanism:
    """four_bar.toml (a Grashof crank-rocker) with the rocker listed first: the Simulator then
    chooses the rocker's angle as the free coordinate, which stops determining the crank at the
    rocker's extreme positions (crank and coupler collinear)."""
    text = (MECHS / "four_bar.toml").read_text()
    head, crank, coupler, tail = text.split("[[bodies]]")
    rocker, joints = tail.split("[[joints]]", 1)
    body = "".join(f"[[bodies]]{b.rstrip()}\n\n" for b in (rocker, coupler, crank))
    return mt.loads_mechanism(head + body + "[[joints]]" + joints)


def integrate(ode: OdeForm, t_end: float, times: np.ndarray, rtol: float = 1e-10,
              atol: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """What a Model Exchange importer does: DOP853 steps, the outputs at ``times`` from the dense
    output (within a step the partition is fixed), and after each step ``completed_step`` →
    ``repartition`` and an integrator restart. Returns (outputs at times, final state)."""
    solver = DOP853(ode.derivatives, ode.t0, ode.x0, t_end, rtol=rtol, atol=atol)
    out, pending = [], [float(t) for t in times]
    while solver.status == "running":
        assert solver.step() is None, "integration failed"
        dense = solver.dense_output()
        while pending and pending[0] <= solver.t:
            t = pending.pop(0)
            out.append(ode.outputs(t, dense(t)))
        if ode.completed_step(solver.t, solver.y):
            x = ode.repartition(solver.t, solver.y)
            solver = DOP853(ode.derivatives, solver.t, x, t_end, rtol=rtol, atol=atol)
    return np.array(out), solver.y


def native(sim: mt.Simulator, times: np.ndarray) -> np.ndarray:
    rows = []
    for t in times:
        sim.advance_to(float(t))
        rows.append(sim.output_vector().copy())
    return np.array(rows)


def coordinate_columns(sim: mt.Simulator) -> list[int]:
    names = sim.output_names()
    return [names.index(f"{b}.{c}") for b in sim.system.body_names for c in ("x", "y", "theta")]


def test_state_layout_and_outputs_at_the_start() -> None:
    sim = mt.Simulator(load("slider_crank.toml"), NUMPY)
    ode = OdeForm(sim)
    assert ode.state_names == ["crank.theta", "crank.omega", "energy.dissipated", "energy.input_work",
                               "energy.constraint_work"]
    assert ode.output_names == sim.output_names()
    np.testing.assert_allclose(ode.outputs(0.0, ode.x0), sim.output_vector(), rtol=1e-12, atol=1e-12)
    sim.set_input("motor_torque", 1.5)
    ode.set_input("motor_torque", 1.5)
    np.testing.assert_allclose(ode.outputs(0.0, ode.x0), sim.output_vector(), rtol=1e-12, atol=1e-12)
    with pytest.raises(mt.PortError):
        ode.set_input("nope", 1.0)


@pytest.mark.parametrize("opts", [NUMPY, COMPILED], ids=["numpy", "compiled"])
def test_slider_crank_by_solve_ivp_matches_the_native_simulator(opts: mt.SolverOptions) -> None:
    """Issue #34's target: θ(2 s) within 1e-7 rad of the native Simulator at rtol 1e-12."""
    mech = load("slider_crank.toml")
    ref = mt.Simulator(mech, REF)
    ode = OdeForm(mt.Simulator(mech, opts))
    for o in (ref, ode):
        o.set_input("motor_torque", 2.0)
        o.set_input("piston_force", -20.0)
    sol = solve_ivp(ode.derivatives, (0.0, 2.0), ode.x0, method="DOP853", rtol=1e-10, atol=1e-12)
    assert sol.status == 0
    ref.advance_to(2.0)
    x = sol.y[:, -1]
    assert abs(x[0] - ref.get_output("crank.theta")) < 1e-7  # measured 9.8e-9 rad (59.2 rad travelled)
    assert abs(x[1] - ref.get_output("crank.omega")) < 1e-6
    y, r = ode.outputs(2.0, x), ref.output_vector()
    for name in ("energy.input_work", "energy.dissipated", "main_bearing.fx", "piston.x"):
        k = ode.output_names.index(name)
        assert abs(y[k] - r[k]) < 1e-6 * max(1.0, abs(r[k])), name
    assert abs(y[ode.output_names.index("energy.balance_error")]) < 1e-6
    assert ode.conditioning(2.0, x) > 0.5  # the crank angle stays a good coordinate


CONTACT = {"terrain_wheel.toml", "terrain_wheel_polygonal.toml"}  # penalty contact: not in the ODE form yet
SHIPPED = sorted([*(p for p in MECHS.glob("*.toml") if p.name not in CONTACT),
                  *(ROOT / "mbsd_twin" / "data" / "mechanisms").glob("*.toml")])


@pytest.mark.parametrize("path", [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in SHIPPED])
def test_shipped_mechanisms_within_1e_6_of_each_coordinates_range(path: Path) -> None:
    """Every shipped mechanism without penalty contact: each body coordinate at 203 times over 2 s
    (not commensurate with the drivers' periods) within 1e-6 of its range over the run, 1e-12 for
    one that does not move (a DOF-0 mechanism has only the energy integrals as states). Measured:
    at most 5.4e-10 absolute (the double pendulum; 7.4e-10 on the numpy path)."""
    mech = mt.load_mechanism(path)
    times = np.linspace(0.0, 2.0, 203)
    ref = native(mt.Simulator(mech, REF), times)
    ode = OdeForm(mt.Simulator(mech, COMPILED))
    got, _ = integrate(ode, 2.0, times)
    cols = coordinate_columns(mt.Simulator(mech, NUMPY))
    span = ref[:, cols].max(axis=0) - ref[:, cols].min(axis=0)
    err = np.abs(got[:, cols] - ref[:, cols]).max(axis=0)
    assert (err <= 1e-6 * span + 1e-12).all(), (err, span)
    assert not ode.changes


@pytest.mark.parametrize("name", ["slider_crank.toml", "cam_follower.toml", "chaplygin_sleigh.toml",
                                  "planetary_gear.toml"])
def test_compiled_and_numpy_paths_agree(name: str) -> None:
    """ẋ and the outputs from the compiled stepper's kernels and from ``Dynamics.evaluate`` at a
    state away from the start (measured: within 4e-12 and 6e-12 of the largest component)."""
    mech = load(name)
    forms = [OdeForm(mt.Simulator(mech, opts)) for opts in (COMPILED, NUMPY)]
    assert forms[0]._compiled is not None and forms[1]._compiled is None
    x = forms[0].x0.copy()
    if len(x) > 3:
        x[0] += 0.3
        x[len(forms[0].free_q)] += 2.0
    a, b = (f.derivatives(0.37, x) for f in forms)
    assert np.abs(a - b).max() <= 1e-10 * np.abs(b).max()
    ya, yb = (f.outputs(0.37, x) for f in forms)  # the compiled output vector, the numpy columns
    assert np.abs(ya - yb).max() <= 1e-10 * np.abs(yb).max()


def _four_bar_velocities(theta2: float, theta3: float, theta4: float, omega2: float) -> np.ndarray:
    """The four-bar's q̇ for a crank speed ω2 from four_bar.toml's closed form (reference points:
    crank at O2, coupler at A, rocker at O4), bodies in the order rocker, coupler, crank."""
    a, b, c = 0.8, 2.0, 1.0
    w3 = a * omega2 * math.sin(theta4 - theta2) / (b * math.sin(theta3 - theta4))
    w4 = a * omega2 * math.sin(theta2 - theta3) / (c * math.sin(theta4 - theta3))
    ax, ay = -a * omega2 * math.sin(theta2), a * omega2 * math.cos(theta2)
    return np.array([0.0, 0.0, w4, ax, ay, w3, 0.0, 0.0, omega2])


def test_conditioning_is_the_closed_form_tangent_component() -> None:
    """One degree of freedom: c(k) = |q̇_k·s_k| / |q̇·s| with q̇ from the closed-form velocity ratios
    and s the coordinate scale (1/ℓ for lengths)."""
    sim = mt.Simulator(rocker_first(), NUMPY)
    ode = OdeForm(sim)
    out = dict(zip(ode.output_names, ode.outputs(0.0, ode.x0), strict=True))
    qdot = _four_bar_velocities(out["crank.theta"], out["coupler.theta"], out["rocker.theta"], 1.0)
    ell = length_scale(sim.system)
    scaled = qdot * np.tile([1.0 / ell, 1.0 / ell, 1.0], 3)
    expect = abs(scaled[2]) / np.linalg.norm(scaled)
    assert ode.state_names[0] == "rocker.theta"
    assert ode.conditioning(0.0, ode.x0) == pytest.approx(expect, rel=1e-10)
    ode.free_q = ode.free_v = np.array([8])  # the crank's angle
    x = ode.state_of(ode.solve(0.0, ode.x0).q, ode.solve(0.0, ode.x0).v, np.zeros(3))
    assert ode.conditioning(0.0, x) == pytest.approx(1.0 / np.linalg.norm(scaled), rel=1e-10)


def test_crank_rocker_through_the_rockers_dead_point_repartitions() -> None:
    """The rocker's angle chosen, the crank turning: at the rocker's extreme position (crank and
    coupler collinear, folded) the partition is re-chosen to the crank's angle; the run over 2 s
    (about 3.5 crank turns and seven more rocker dead points) matches the native Simulator."""
    mech = rocker_first()
    sims = [mt.Simulator(mech, o) for o in (REF, NUMPY)]
    for s in sims:
        s.set_parameter("rocker.omega_start", 3.0)  # the crank at about −15.7 rad/s
    ref = native(sims[0], TIMES)
    ode = OdeForm(sims[1])
    got, x = integrate(ode, 2.0, TIMES)
    assert len(ode.changes) == 1
    change = ode.changes[0]
    assert change.before == ("rocker.theta", "rocker.omega") and change.after == ("crank.theta", "crank.omega")
    assert change.conditioning_before < partition.THRESHOLD < change.conditioning_after
    at = mt.Simulator(mech, REF)
    at.set_parameter("rocker.omega_start", 3.0)
    out = dict(zip(ode.output_names, native(at, np.array([change.time]))[0], strict=True))
    # independently: the rocker is at a dead point when crank and coupler are collinear
    assert abs(math.sin(out["crank.theta"] - out["coupler.theta"])) < 0.05
    cols = coordinate_columns(sims[1])
    span = ref[:, cols].max(axis=0) - ref[:, cols].min(axis=0)
    assert (np.abs(got[:, cols] - ref[:, cols]).max(axis=0) <= 1e-6 * span + 1e-12).all()
    k = ode.output_names.index("crank.theta")
    assert abs(got[-1, k] - ref[-1, k]) < 1e-7  # measured 7e-9 rad


def test_an_unreachable_free_coordinate_fails_naming_the_constraints() -> None:
    """The rocker's angle beyond its extreme position (|B − O2| = √(5 + 4·cos θ4) must lie within
    b ± a = [1.2, 2.8] m: θ4 ≥ 0.78 rad on this branch): no dependent coordinates exist."""
    sim = mt.Simulator(rocker_first(), NUMPY)
    ode = OdeForm(sim)
    x = ode.x0.copy()
    x[0] = 0.6
    with pytest.raises(AssemblyError, match=r"free ones \(rocker.theta\)") as info:
        ode.derivatives(0.0, x)
    assert info.value.worst and {n for n, _ in info.value.worst} <= set(sim.system.constraint_names)
    assert info.value.residual > 1e-3


def _whole_map(ode: OdeForm, t: float, x: np.ndarray, u: dict[str, float]) -> np.ndarray:
    ode.set_inputs(u)
    return np.concatenate([ode.derivatives(t, x), ode.outputs(t, x)])


def test_jacobian_of_the_mass_spring_damper_is_the_closed_form() -> None:
    """m·ẍ = −k·(x − 0.5) − c·ẋ, dissipated power c·ẋ² (mass_spring_damper.toml: m = 2 kg,
    k = 200 N/m, c = 4 N·s/m): ∂ẋ/∂x rows [0, 1], [−k/m, −c/m], [0, 2·c·ẋ] on (x, ẋ)."""
    ode = OdeForm(mt.Simulator(load("mass_spring_damper.toml"), NUMPY))
    assert ode.state_names[:2] == ["block.x", "block.vx"]
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = np.array([rng.uniform(0.3, 0.8), rng.uniform(-2, 2), 0.1, 0.0, 0.0])
        A = ode.jacobians(0.0, x)[0]
        expect = np.array([[0.0, 1.0], [-100.0, -2.0], [0.0, 8.0 * x[1]]])
        np.testing.assert_allclose(A[:3, :2], expect, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(A[:, 2:], 0.0, atol=1e-9)  # the integrals feed nothing back


@pytest.mark.parametrize("name", ["slider_crank.toml", "four_bar.toml", "quick_return.toml"])
def test_directional_derivatives_match_central_differences_at_10_random_states(name: str) -> None:
    """[A B; C D] by ``jacobians`` (the tangent map and fourth-order differences of the unconstrained
    kernels) against second-order central differences of the whole map (Newton included), column
    by column within 1e-6 of the column's size; and one combined seed is the sum of its parts.
    Measured over 30 states: at most 7.9e-8 (four-bar) with steps of 1e-5; with 1e-6 the
    differences' own noise (Newton's tolerance over the step) made it 9e-7, with 1e-4 their
    truncation 3e-7."""
    ode = OdeForm(mt.Simulator(load(name), NUMPY))
    rng = np.random.default_rng(34)
    ri = ode.n_states + ode.output_names.index("constraints.position_residual")
    for _ in range(10):
        t = float(rng.uniform(0.0, 2.0))
        x = np.array([rng.uniform(-math.pi, math.pi), rng.uniform(-40, 40), rng.uniform(0, 5),
                      rng.uniform(-5, 5), rng.uniform(-1, 1)])
        u = {port: float(rng.uniform(-3, 3)) * (10.0 if port == "piston_force" else 1.0) for port in ode.inputs}
        ode.set_inputs(u)
        A, B, C, D = ode.jacobians(t, x)
        J = np.block([[A, B], [C, D]])
        cols = []
        for k in range(len(x)):
            h = 1e-5 * max(1.0, abs(x[k]))  # the differences' best: Newton's noise / h against h²
            e = np.zeros(len(x))
            e[k] = h
            cols.append((_whole_map(ode, t, x + e, u) - _whole_map(ode, t, x - e, u)) / (2 * h))
        for name, value in u.items():
            h = 1e-5 * max(1.0, abs(value))
            cols.append((_whole_map(ode, t, x, {**u, name: value + h})
                         - _whole_map(ode, t, x, {**u, name: value - h})) / (2 * h))
        ode.set_inputs(u)
        fd = np.array(cols).T
        fd[ri] = 0.0  # max|C|: round-off on the manifold
        size = np.abs(fd).max(axis=0)
        assert (np.abs(J - fd).max(axis=0) <= 1e-6 * size).all()
        seed = rng.normal(size=len(x))
        du = dict.fromkeys(ode.inputs, 0.5)
        dxdot, dy = ode.directional(t, x, seed, du)
        np.testing.assert_allclose(dxdot, A @ seed + B.sum(axis=1) * 0.5, rtol=1e-7, atol=1e-8 * np.abs(dxdot).max())
        np.testing.assert_allclose(dy, C @ seed + D.sum(axis=1) * 0.5, rtol=1e-7, atol=1e-8 * np.abs(dy).max())
