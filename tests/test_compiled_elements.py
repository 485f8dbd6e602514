"""The knife edge and the cam joint on the compiled path (issue #16): the shipped mechanisms that use
them run compiled with default options, agree with the numpy path run at tight tolerance, and keep
what their physics says must hold (no side slip, constant energy, the constraints)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.compiled_model import pack
from mbsd_twin.dynamics import Dynamics
from mbsd_twin.nb_solve import accelerations, reactions
from mbsd_twin.outputs import reaction_columns

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


@pytest.mark.parametrize("name", ["chaplygin_sleigh"])
def test_compiled_evaluation_matches_numpy_at_random_states(name: str) -> None:
    """Accelerations, multipliers and joint reactions of the packed model against the numpy
    kernels at states off the constraints (the numpy kernels are the independent check)."""
    system = mt.compile_mechanism(mt.load_mechanism(EX / f"{name}.toml"))
    dyn = Dynamics(system, mt.SolverOptions())
    model, joints = pack(system, dyn.rows, None)
    rng = np.random.default_rng(11)
    q0 = system.q0
    for _ in range(5):
        q = q0 + rng.normal(scale=0.3, size=q0.shape)
        v = rng.normal(size=q0.shape)
        t = float(rng.uniform(0, 2))
        a, lam, _, _, _, C, Jv, Ct, ok = accelerations(t, q, v, np.zeros(1), model)
        ev = dyn.evaluate(t, q, v, {})
        assert ok
        np.testing.assert_allclose(a, ev.a, rtol=0, atol=1e-12 * max(1.0, np.abs(ev.a).max()))
        np.testing.assert_allclose(lam, ev.lam, rtol=0, atol=1e-12 * max(1.0, np.abs(ev.lam).max()))
        np.testing.assert_allclose(C, system.constraints(q, t), rtol=0, atol=1e-14)
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
