"""Large mechanisms (issue #33): built within generous time bounds (the figures are in
benchmarks/bench_scale.py), and the sparse minimum-norm Newton step that assembles them agreeing
with the pseudo-inverse it replaces above ``SPARSE_MIN`` coordinates."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from large_mechanisms import chain, free_bodies

import mbsd_twin as mt
from mbsd_twin.physics.system import compile_mechanism
from mbsd_twin.solvers import linsolve
from mbsd_twin.solvers.linsolve import SPARSE_MIN, newton_step, sparse_min_norm


def _build(mech: mt.Mechanism) -> tuple[mt.Simulator, float]:
    mt.Simulator(chain(2))  # the compiled kernels loaded: what is timed is the build itself
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = mt.Simulator(mech)
    return sim, time.perf_counter() - start


def test_300_free_bodies_build_quickly() -> None:
    sim, seconds = _build(free_bodies(300))
    assert seconds < 10.0  # a guard against a quadratic build, not a timing: 0.01 s at load 1.7, 0.05 s at load 4
    assert len([p for p in sim.parameters if p.name.endswith("_start")]) == 6 * 300


def test_1000_link_chain_builds_quickly() -> None:
    sim, seconds = _build(chain(1000))
    assert seconds < 30.0  # 0.12 s at load 1.7, 0.3-0.5 s at load 4 (about an hour before issue #33)
    starts = [p.name for p in sim.parameters if p.name.endswith("_start")]
    assert starts == [f"link{i}.theta_start" for i in range(1000)] + [f"link{i}.omega_start" for i in range(1000)]


def test_violated_chain_assembles() -> None:
    """Every joint 0.1 rad off: the build assembles it onto the joints (tip of the straight chain
    at x = 0.1·n when released horizontal from the assembled pose)."""
    sim, seconds = _build(chain(300, 0.1))
    assert seconds < 20.0  # 0.05 s at load 1.7, 0.11 s at load 4, 2.66 s once at load 7 beside 6 workers
    q = sim._y0[:sim.system.n_coord]
    assert np.abs(sim.system.constraints(q, 0.0)).max() < 1e-9


def _random_jacobian(m: int, n: int, seed: int) -> np.ndarray:
    """A banded m x n matrix of full row rank (a unit diagonal dominating its neighbours)."""
    rng = np.random.default_rng(seed)
    a = np.zeros((m, n))
    for i in range(m):
        a[i, i] = 2.0 + rng.random()
        cols = rng.integers(0, n, 4)
        a[i, cols] += 0.3 * rng.standard_normal(4)
    return a


def test_sparse_min_norm_is_the_pseudo_inverse_solution() -> None:
    a = _random_jacobian(200, 330, 1)
    c = np.random.default_rng(2).standard_normal(200)
    x = sparse_min_norm(a, c)
    assert x is not None
    np.testing.assert_allclose(x, np.linalg.pinv(a) @ c, rtol=0, atol=1e-12 * np.abs(x).max())


def test_sparse_min_norm_declines_dependent_rows() -> None:
    a = _random_jacobian(200, 330, 3)
    a[7] = a[3]  # a repeated row: the saddle-point matrix is singular
    c = np.random.default_rng(4).standard_normal(200)
    c[7] = c[3] + 1.0  # and inconsistent: no exact solution
    assert sparse_min_norm(a, c) is None
    step = newton_step(a[None], -c[None], square=False)[0]  # the pseudo-inverse instead
    np.testing.assert_allclose(step, np.linalg.pinv(a, rcond=1e-10) @ c, atol=1e-12)


@pytest.mark.parametrize("n", [SPARSE_MIN - 1, SPARSE_MIN])
def test_newton_step_on_both_sides_of_the_threshold(n: int) -> None:
    a = _random_jacobian(2 * n // 3, n, 5)
    c = np.random.default_rng(6).standard_normal(2 * n // 3)
    step = newton_step(a[None], c[None], square=False)[0]
    np.testing.assert_allclose(step, -np.linalg.pinv(a) @ c, atol=1e-11)


def test_sparse_assembly_matches_the_dense_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same violated chain assembled by the sparse step and, with the threshold raised, by
    the pseudo-inverse: the same pose (both minimum-norm Newton from the same guess)."""
    mech = chain(110, 0.1)  # 330 coordinates: above SPARSE_MIN
    sparse = mt.Simulator(mech)._y0
    monkeypatch.setattr(linsolve, "SPARSE_MIN", 10**9)
    dense = mt.Simulator(mech)._y0
    np.testing.assert_allclose(sparse, dense, rtol=0, atol=1e-9)
    assert not math.isclose(sparse[2], 0.1)  # it moved from the guess


@pytest.mark.parametrize("name", ["slider_crank", "cam_follower", "chaplygin_sleigh", "planetary_gear",
                                  "engine_boxer", "terrain_wheel"])
def test_sparse_jacobian_is_the_dense_one(name: str) -> None:
    """System.evaluate_sparse holds exactly the entries evaluate_batch scatters, off the constraints."""
    path = Path(__file__).resolve().parents[1] / "examples" / "mechanisms" / f"{name}.toml"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        system = compile_mechanism(mt.load_mechanism(path))
    q = system.q0 + 0.1 * np.random.default_rng(7).standard_normal(system.n_coord)
    C, J = system.evaluate_sparse(q, 0.3)
    C_dense, J_dense, _ = system.evaluate_batch(q[None, :], np.array([0.3]))
    assert np.array_equal(C, C_dense[0])
    assert np.array_equal(J.toarray(), J_dense[0])


