"""The compiled (numba) path against the numpy path: same accelerations, multipliers, energy
rates and reactions at random states, same trajectories within the solver tolerance."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.compiled.compiled_model import Unsupported, pack
from mbsd_twin.compiled.nb_solve import accelerations, project, reactions, workspace
from mbsd_twin.model.model import Load
from mbsd_twin.physics.outputs import reaction_columns
from mbsd_twin.solvers.dynamics import Dynamics

EX = Path(__file__).resolve().parents[1] / "examples/mechanisms"


def _loaded_slider_crank() -> mt.Mechanism:
    """Every load kind the compiled path supports, on the slider crank."""
    b = mt.MechanismBuilder("loaded")
    b.body("crank", 1.0, 8.333e-4, cg=(0.05, 0.01))
    b.body("rod", 2.0, 0.015, cg=(0.15, -0.02), position=(0.1, 0.0))
    b.body("piston", 1.5, 1e-3, position=(0.4, 0.0))
    b.revolute("main_bearing", "ground", "crank", (0, 0), (0, 0), viscous_friction=0.05)
    b.revolute("crank_pin", "crank", "rod", (0.1, 0), (0, 0))
    b.revolute("wrist_pin", "rod", "piston", (0.3, 0), (0, 0))
    b.prismatic("guide", "ground", "piston", (0, 0), (0, 0), axis=(1, 0), viscous_friction=3.0)
    b.torque("motor", "crank", input="motor_torque")
    b.force("gas", "piston", (0.01, 0.0), (1.0, 0.2), frame="body", profile=mt.Harmonic(50.0, 3.0))
    b.spring_damper("spring", "ground", "rod", (0.2, 0.3), (0.1, 0.0), stiffness=400.0, damping=2.0,
                    free_length=0.25)
    b.rotational_spring_damper("torsion", "crank", "rod", stiffness=3.0, damping=0.1, free_angle=0.2)
    return b.build()


Frame = tuple[tuple[str, ...], tuple[float, float], float]


def _in_rotating_frames(mech: mt.Mechanism, *frames: Frame) -> mt.Mechanism:
    """``mech`` with a ``rotating_frame`` load per (bodies — all when empty —, centre, rate Ω)."""
    extra = tuple(Load(f"frame{k}", "rotating_frame", bodies, (center,), value=rate)
                  for k, (bodies, center, rate) in enumerate(frames))
    return replace(mech, loads=mech.loads + extra)


# the loaded slider crank in a frame turning about an off-origin point (all bodies); the four-bar with two
# frames on subsets, the coupler in both (one row per frame and body)
_FRAMES = [_in_rotating_frames(_loaded_slider_crank(), ((), (0.2, -0.1), 3.0)),
           _in_rotating_frames(mt.load_mechanism(EX / "four_bar_driven.toml"), (("coupler",), (0.1, 0.3), -2.5),
                               (("crank", "coupler"), (0.0, 0.0), 1.5))]


@pytest.mark.parametrize("mech", [_loaded_slider_crank(), mt.load_mechanism(EX / "four_bar_driven.toml"),
                                  mt.load_mechanism(EX / "double_pendulum.toml"), *_FRAMES],
                         ids=["loaded", "four_bar", "dp", "loaded-frame", "four_bar-frames-subsets"])
def test_compiled_evaluation_matches_numpy_at_random_states(mech: mt.Mechanism) -> None:
    system = mt.compile_mechanism(mech)
    dyn = Dynamics(system, mt.SolverOptions())
    model, joints = pack(system, dyn.rows, None)
    rng = np.random.default_rng(7)
    q0 = mt.assemble(system)
    names = list(system.input_names)
    for _ in range(5):
        q = q0 + rng.normal(scale=0.05, size=q0.shape)  # off the constraints on purpose
        v = rng.normal(size=q0.shape)
        t = float(rng.uniform(0, 2))
        inputs = {k: float(rng.normal()) for k in names}
        u = np.array([inputs[k] for k in names] or [0.0])
        a, lam, el, di, pin, C, Jv, Ct, ok = accelerations(t, q, v, u, model)
        ev = dyn.evaluate(t, q, v, inputs)
        scale = max(1.0, np.abs(ev.a).max())
        assert ok
        assert np.abs(a - ev.a).max() < 1e-10 * scale
        assert np.abs(lam - ev.lam).max() < 1e-10 * max(1.0, np.abs(ev.lam).max())
        assert el == pytest.approx(ev.loads.elastic[0], rel=1e-12, abs=1e-12)
        assert di == pytest.approx(ev.loads.dissipation[0], rel=1e-12, abs=1e-12)
        assert pin == pytest.approx(ev.loads.input[0], rel=1e-12, abs=1e-12)
        react = reactions(q, lam, Jv, model[3], joints, system.n_coord)
        cols = reaction_columns(system, q[None], ev.Cq[None], ev.lam[None])
        for k, j in enumerate(system.joints):
            for c in j.components:
                assert react[k, "xyz".index(c[1])] == pytest.approx(cols[f"{j.name}.{c}"][0], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize(("dq", "dv"), [(1e-10, 1e-9), (1e-10, 0.5), (1e-3, 0.5)],
                         ids=["after-a-step", "reused-factor-large-velocity-residual", "far-off"])
def test_compiled_projection_is_the_minimum_norm_correction(dq: float, dv: float) -> None:
    """project() against numpy: q on C(q) = 0 (to the tolerance), and v the minimum-norm correction
    v − J⁺(J·v + Ct) at the projected q (J⁺ by numpy's pseudo-inverse). The three cases take its
    three paths: one Newton step with the factor reused for the velocities, the same with a velocity
    residual too large to reuse it, and several Newton steps."""
    mech = _loaded_slider_crank()
    system = mt.compile_mechanism(mech)
    dyn = Dynamics(system, mt.SolverOptions())
    model, _ = pack(system, dyn.rows, None)
    ws = workspace(model)
    rng = np.random.default_rng(3)
    q0 = mt.assemble(system)
    n, t = system.n_coord, 0.3
    for _ in range(3):
        J0 = system.jacobian(q0, t)
        v0 = rng.normal(size=n)
        v0 -= np.linalg.pinv(J0) @ (J0 @ v0 + system.ct(q0, t))   # consistent, then disturbed
        y = np.concatenate([q0 + dq * rng.normal(size=n), v0 + dv * rng.normal(size=n), np.zeros(3)])
        v_in = y[n:2 * n].copy()
        assert project(t, y, model, 1e-12, ws)
        q, v = y[:n], y[n:2 * n]
        assert np.abs(system.constraints(q, t)).max() < 1e-12
        J = system.jacobian(q, t)
        v_ref = v_in - np.linalg.pinv(J) @ (J @ v_in + system.ct(q, t))
        assert np.abs(J @ v + system.ct(q, t)).max() < 1e-12 * max(1.0, np.abs(v_in).max())
        assert np.abs(v - v_ref).max() < 1e-9 * max(dv, 1e-6)


def test_trajectories_agree_within_the_solver_tolerance() -> None:
    mech = _loaded_slider_crank()
    runs = {}
    for backend in ("compiled", "numpy"):
        sim = mt.Simulator(mech, mt.SolverOptions(backend=backend, rtol=1e-10, atol=1e-12))
        sim.set_input("motor_torque", 1.5)
        sim.advance_to(0.5)
        runs[backend] = sim.outputs()
    for name in ("crank.theta", "crank.omega", "piston.x", "energy.dissipated", "energy.input_work"):
        assert runs["compiled"][name] == pytest.approx(runs["numpy"][name], rel=1e-7, abs=1e-9)
    assert abs(runs["compiled"]["energy.balance_error"]) < 1e-8


@pytest.mark.parametrize("mech", [_in_rotating_frames(mt.load_mechanism(EX / "double_pendulum.toml"),
                                                      ((), (0.3, -0.2), 2.0)), _FRAMES[1]], ids=["dp", "four_bar"])
def test_rotating_frames_run_compiled_and_agree_with_numpy(mech: mt.Mechanism) -> None:
    """A rotating frame no longer sends a mechanism to the numpy path; 1.2 s on both paths give the
    same positions, and the centrifugal power counted as input keeps the energy balance closed."""
    runs = {}
    for backend in ("compiled", "numpy"):
        sim = mt.Simulator(mech, mt.SolverOptions(backend=backend, rtol=1e-10, atol=1e-12))
        assert sim.backend == backend
        sim.advance_to(1.2)
        runs[backend] = sim.outputs()
    assert mt.Simulator(mech).backend == "compiled"
    for body in mech.bodies:
        for c in ("x", "y", "theta"):
            name = f"{body.name}.{c}"
            assert runs["compiled"][name] == pytest.approx(runs["numpy"][name], rel=1e-7, abs=1e-8), name
    assert runs["compiled"]["energy.input_work"] == pytest.approx(runs["numpy"]["energy.input_work"], rel=1e-6,
                                                                  abs=1e-8)
    assert abs(runs["compiled"]["energy.balance_error"]) < 1e-7


def test_a_live_mass_change_reaches_the_rotating_frame_on_both_paths() -> None:
    """The pseudo-forces read the bodies' mass and centre of mass where a live parameter change
    writes them (the compiled model's body arrays, the System's on the numpy path)."""
    mech = _FRAMES[1]
    runs = {}
    for backend in ("compiled", "numpy"):
        sim = mt.Simulator(mech, mt.SolverOptions(backend=backend, rtol=1e-10, atol=1e-12))
        sim.advance_to(0.2)
        sim.set_parameter("coupler.mass", 3.0 * mech.bodies[1].mass)
        sim.set_parameter("coupler.cg_x", 0.05)
        sim.advance_to(0.6)
        runs[backend] = sim.outputs()
    fresh = mt.Simulator(mech, mt.SolverOptions(backend="numpy", rtol=1e-10, atol=1e-12))
    fresh.advance_to(0.6)
    for name in ("motor.effort", "crank_pin.fx", "energy.input_work"):
        assert runs["compiled"][name] == pytest.approx(runs["numpy"][name], rel=1e-6, abs=1e-8), name
    assert runs["numpy"]["energy.input_work"] != pytest.approx(fresh.outputs()["energy.input_work"], rel=1e-3)


def test_unsupported_features_fall_back_to_numpy_or_fail_clearly() -> None:
    b = mt.MechanismBuilder("tabled")
    b.body("bar", 1.0, 0.1, cg=(0.5, 0.0))
    b.revolute("pin", "ground", "bar", (0, 0), (0, 0))
    b.torque("t", "bar", profile=mt.FunctionProfile(lambda t: (t, 1.0, 0.0)))
    mech = b.build()
    with pytest.raises(Unsupported, match="callable"):
        pack(mt.compile_mechanism(mech), np.arange(2), None)
    auto = mt.Simulator(mech)  # falls back
    auto.advance_to(0.1)
    with pytest.raises(mt.MbsdError, match="compiled backend does not support callable profile"):
        mt.Simulator(mech, mt.SolverOptions(backend="compiled"))


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_runaway_motion_fails_with_a_message_instead_of_hanging(backend: str) -> None:
    """A 1e12 N·m torque makes the crank spin up without bound: the step size shrinks forever.
    The step budget turns that into a SolverFailure naming the cause."""
    sim = mt.Simulator(mt.load_mechanism(EX / "slider_crank.toml"),
                       mt.SolverOptions(backend=backend, max_steps=2000 if backend == "compiled" else 200))
    sim.set_input("motor_torque", 1e12)
    with pytest.raises(mt.SolverFailure, match="internal steps"):
        sim.advance_to(0.001)
    assert 0.0 < sim.time < 0.001


def test_shaped_views_equal_numpy_reshapes_and_write_through() -> None:
    """nb_kernels.shaped (the flat model's views without numba's reshape helper) against numpy."""
    from numba import njit

    from mbsd_twin.compiled.nb_kernels import shaped

    @njit(cache=False)
    def views(f, i, start):  # noqa: ANN001, ANN202
        m, t, k = shaped(f, start, (3, 4)), shaped(f, start + 1, (2, 3, 3)), shaped(i, start, (5, 2))
        k[4, 1] = -1
        return m.copy(), t.copy(), k.copy(), m.strides, t.strides

    f, i = np.arange(40.0), np.arange(30, dtype=np.int64)
    m, t, k, ms, ts = views(f, i, 7)
    np.testing.assert_array_equal(m, np.arange(40.0)[7:19].reshape(3, 4))
    np.testing.assert_array_equal(t, np.arange(40.0)[8:26].reshape(2, 3, 3))
    assert ms == (32, 8) and ts == (72, 24, 8)
    assert i[7 + 9] == -1 and k[4, 1] == -1            # a view: the write reached the buffer


@pytest.mark.parametrize(("m", "bw"), [(1, 0), (3, 3), (8, 3), (40, 3), (13, 5)])
def test_banded_factorisation_solves_like_numpy(m: int, bw: int) -> None:
    """nb_band.band_solve (L·D·Lᵀ of the banded lower storage; unrolled for bw = 3) against
    numpy's dense solve, and a matrix that is not positive definite is refused."""
    from numba import njit

    from mbsd_twin.compiled.nb_band import band_solve

    @njit(cache=False)
    def solve(Sb, rhs, bw):  # noqa: ANN001, ANN202
        return band_solve(Sb, rhs, bw)

    rng = np.random.default_rng(m)
    R = np.tril(np.triu(rng.normal(size=(m, m)), -bw), bw)   # half-bandwidth bw
    S = R + R.T
    S += (np.abs(S).sum(axis=1).max() + 1.0) * np.eye(m)      # diagonally dominant: positive definite
    Sb = np.zeros((m, bw + 1))
    for p in range(m):
        for d in range(min(p, bw) + 1):
            Sb[p, d] = S[p, p - d]
    b = rng.normal(size=m)
    x = b.copy()
    assert solve(Sb, x, bw)
    np.testing.assert_allclose(x, np.linalg.solve(S, b), rtol=1e-13, atol=1e-14)
    Sb[:, 0] -= 2 * m + 2.0 * np.abs(S).sum()           # negative diagonal: not positive definite
    assert not solve(Sb, b.copy(), bw)


def test_direct_entry_point_steps_bit_for_bit_like_the_dispatcher() -> None:
    """fastpath's direct entry point for nb_stepper.advance (no per-call type dispatch) against
    the numba dispatcher: the same integrator state, bit for bit; an object without numba's
    compile interface falls back to itself."""
    from mbsd_twin.compiled import nb_stepper as ns
    from mbsd_twin.compiled.fastpath import _entry

    sims = [mt.Simulator(mt.load_mechanism(EX / "slider_crank.toml")) for _ in range(2)]
    assert sims[0]._stepper._advance is not ns.advance
    sims[1]._stepper._advance = ns.advance
    for sim in sims:
        for k in range(1, 60):
            sim.set_input("motor_torque", 2.0 if k < 30 else -1.0)
            sim.advance_to(k * 1e-3)
    a, b = (s._stepper.export()["S"] for s in sims)
    assert a == b and sims[0].get_output("crank.theta") != 0.0
    plain = object()
    assert _entry(plain, (1.0,)) is plain


def test_pinned_context_follows_inputs_written_in_place_and_refuses_a_short_buffer() -> None:
    """The stepper's pinned (inputs, model, workspace) context (nb_stepper.bind) sees the inputs
    that set_inputs writes in place: after a torque step from 1 to 3 N·m the compiled path's crank
    acceleration and angle agree with the numpy path's (a context still reading 1 N·m would be off
    by about 2 N·m / I_eff). A buffer shorter than the context is refused."""
    from mbsd_twin.compiled import nb_stepper as ns

    mech = mt.load_mechanism(EX / "slider_crank.toml")
    sims = {b: mt.Simulator(mech, mt.SolverOptions(backend=b)) for b in ("compiled", "numpy")}
    alpha = {}
    for b, sim in sims.items():
        sim.set_input("motor_torque", 1.0)
        sim.advance_to(0.02)
        sim.set_input("motor_torque", 3.0)
        sim.advance_to(0.04)
        alpha[b] = sim.get_output("crank.alpha"), sim.get_output("crank.theta")
    np.testing.assert_allclose(alpha["compiled"], alpha["numpy"], rtol=1e-6)
    st = sims["compiled"]._stepper
    assert st._u.tolist() == [3.0, 0.0]
    short = np.zeros(st._cb.shape[0] - 1, dtype=np.int64)  # too small: left as it was, the need returned
    assert ns.bind(short, st._u, st._ib, st._fb, st._wb) > 8 * short.shape[0] and not short.any()


def test_copied_compiled_stepper_points_at_its_own_arrays() -> None:
    """copy.deepcopy of the stepper itself: the copy's state view and pinned context are its own
    (the copy follows its own input, the original is left as it was)."""
    import copy

    sim = mt.Simulator(mt.load_mechanism(EX / "slider_crank.toml"))
    sim.set_input("motor_torque", 2.0)
    sim.advance_to(0.05)
    st = sim._stepper
    cp = copy.deepcopy(st)
    assert np.shares_memory(cp.y, cp._S) and not np.shares_memory(cp.y, st._S)
    cp.set_inputs({"motor_torque": -3.0, "piston_force": 0.0})
    cp.advance_to(0.1)
    st.advance_to(0.1)
    ref = mt.Simulator(mt.load_mechanism(EX / "slider_crank.toml"))
    ref.set_input("motor_torque", 2.0)
    ref.advance_to(0.05)
    ref.set_input("motor_torque", -3.0)
    ref.advance_to(0.1)
    assert cp.y.tolist() == ref._stepper.y.tolist()
    omega = sim.system.n_coord + 2                 # the crank's ω in y = [q, v, integrals]
    assert st.y[omega] > cp.y[omega] + 1.0         # the original still turns at 2 N·m
