"""Large mechanisms (issue #33): ``check`` by Lanczos and one sparse elimination of Cqᵀ above
``SPARSE_MIN`` coordinates, with redundant rows too (the DOF and redundant rows of every shipped
mechanism pinned, and the sparse path's agreeing with them when forced onto those mechanisms);
the kinematic and inverse-dynamics sweeps by one sparse LU per point (solvers/sparse_sweep.py)
against the dense path and, on a 1000-link chain held horizontal, against statics by hand. The
figures are in benchmarks/bench_scale.py; the tests use generous time bounds."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from large_mechanisms import chain, driven_chain, hanging_ladder

import mbsd_twin as mt
from mbsd_twin.physics.system import compile_mechanism
from mbsd_twin.solvers import linsolve
from mbsd_twin.solvers.kinematics import KinematicsOptions, assemble
from mbsd_twin.solvers.newton import RankInfo, rank_info

ROOT = Path(__file__).resolve().parents[1]
# (coordinates, constraint rows, DOF) of every shipped mechanism as the dense SVD found them at
# 3b281c7 (none of them has a redundant row)
SHIPPED = {
    "examples/mechanisms/cam_follower.toml": (8, 8, 0),
    "examples/mechanisms/chaplygin_sleigh.toml": (3, 1, 2),
    "examples/mechanisms/double_pendulum.toml": (6, 4, 2),
    "examples/mechanisms/engine_boxer.toml": (18, 18, 0),
    "examples/mechanisms/engine_inline_four.toml": (36, 36, 0),
    "examples/mechanisms/engine_single_cylinder.toml": (9, 9, 0),
    "examples/mechanisms/four_bar.toml": (9, 8, 1),
    "examples/mechanisms/four_bar_bicycle_leg.toml": (9, 9, 0),
    "examples/mechanisms/four_bar_driven.toml": (9, 9, 0),
    "examples/mechanisms/geneva_drive.toml": (6, 6, 0),
    "examples/mechanisms/mass_spring_damper.toml": (3, 2, 1),
    "examples/mechanisms/pantograph.toml": (12, 12, 0),
    "examples/mechanisms/pendulum.toml": (3, 2, 1),
    "examples/mechanisms/planetary_gear.toml": (12, 11, 1),
    "examples/mechanisms/quick_return.toml": (9, 8, 1),
    "examples/mechanisms/scotch_yoke.toml": (6, 6, 0),
    "examples/mechanisms/slider_crank.toml": (9, 8, 1),
    "examples/mechanisms/slider_crank_driven.toml": (9, 9, 0),
    "examples/mechanisms/terrain_wheel.toml": (6, 2, 4),
    "examples/mechanisms/terrain_wheel_polygonal.toml": (6, 2, 4),
    "mbsd_twin/data/mechanisms/pendulum_driven.toml": (3, 2, 1),
    "mbsd_twin/data/mechanisms/slider_crank.toml": (9, 8, 1),
}


def test_every_shipped_mechanism_is_pinned() -> None:
    found = {str(p.relative_to(ROOT)) for d in ("examples/mechanisms", "mbsd_twin/data/mechanisms")
             for p in (ROOT / d).glob("*.toml")}
    assert found == set(SHIPPED)


@pytest.mark.parametrize("path", sorted(SHIPPED))
def test_shipped_check_unchanged_and_the_sparse_path_agrees(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = mt.check(mt.load_mechanism(ROOT / path))
        n, m, dof = SHIPPED[path]
        assert (report.n_coord, report.n_constraints, report.dof, report.redundant_constraints) == (n, m, dof, [])
        system = compile_mechanism(mt.load_mechanism(ROOT / path))
        q = assemble(system, None, 0.0, KinematicsOptions())
        monkeypatch.setattr(linsolve, "SPARSE_MIN", 0)  # the sparse path forced onto a small mechanism
        forced = rank_info(system, q, 0.0)
    assert (forced.dof, forced.redundant_rows) == (dof, [])
    assert forced.condition == pytest.approx(report.condition_number, rel=1e-6)


def pinned_twice(n: int) -> mt.Mechanism:
    """An n-link chain (tests/large_mechanisms.py) whose first link is hinged to ground a second
    time, by the last joint: two dependent rows."""
    b = mt.MechanismBuilder("chain-pinned-twice")
    prev = "ground"
    for i in range(n):
        b.body(f"link{i}", 0.1, 0.1 * 0.01 / 12, cg=(0.05, 0.0), position=(0.1 * i, 0.0))
        b.revolute(f"j{i}", prev, f"link{i}", (0.1, 0.0) if i else (0.0, 0.0), (0.0, 0.0))
        prev = f"link{i}"
    b.revolute("again", "ground", "link0", (0.0, 0.0), (0.0, 0.0))
    return b.build()


def _rank_infos(mech: mt.Mechanism, monkeypatch: pytest.MonkeyPatch) -> tuple[RankInfo, RankInfo, np.ndarray]:
    system = compile_mechanism(mech)
    q = assemble(system, None, 0.0, KinematicsOptions())
    sparse = rank_info(system, q, 0.0)
    with monkeypatch.context() as m:
        m.setattr(linsolve, "SPARSE_MIN", 10**9)
        dense = rank_info(system, q, 0.0)
    return sparse, dense, system.jacobian(q, 0.0)


def test_sparse_rank_info_names_the_later_dependent_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank and DOF as the SVD finds them; the redundant rows are the later of the dependent ones
    (the second hinge, rows 220 and 221), and without them the Jacobian has full row rank and the
    same rank (dense SVDs)."""
    sparse, dense, Cq = _rank_infos(pinned_twice(110), monkeypatch)
    assert sparse.sparse and not dense.sparse
    assert (sparse.rank, sparse.dof) == (dense.rank, dense.dof) == (220, 110)
    assert sparse.redundant_rows == [220, 221]
    kept = np.delete(Cq, sparse.redundant_rows, axis=0)
    assert np.linalg.matrix_rank(kept, tol=1e-9 * np.linalg.norm(Cq, 2)) == len(kept) == dense.rank
    assert sparse.condition == pytest.approx(dense.condition, rel=1e-6)


@pytest.mark.parametrize("mech, dof, redundant", [
    (lambda: chain(1000), 1000, []),
    (lambda: hanging_ladder(100), 100, []),
    (lambda: pinned_twice(1000), 1000, ["again[x]", "again[y]"]),
], ids=["chain1000", "ladder100", "chain1000-pinned-twice"])
def test_large_mechanisms_are_checked_quickly(mech, dof: int, redundant: list[str]) -> None:  # type: ignore[no-untyped-def]
    system = compile_mechanism(mech())
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = mt.check(system)
    assert time.perf_counter() - start < 10.0  # about 0.1-0.9 s (benchmarks/bench_scale.py)
    assert (report.dof, report.redundant_constraints) == (dof, redundant)


def _both_paths(mech: mt.Mechanism, t: np.ndarray, monkeypatch: pytest.MonkeyPatch,
                sparse_min: int) -> tuple[mt.Result, mt.Result]:
    """(inverse dynamics with SPARSE_MIN = ``sparse_min``, with the dense path only)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with monkeypatch.context() as m:
            m.setattr(linsolve, "SPARSE_MIN", sparse_min)
            sparse = mt.inverse_dynamics(compile_mechanism(mech), t)
        with monkeypatch.context() as m:
            m.setattr(linsolve, "SPARSE_MIN", 10**9)
            dense = mt.inverse_dynamics(compile_mechanism(mech), t)
    return sparse, dense


@pytest.mark.parametrize("path, span", [("examples/mechanisms/four_bar_driven.toml", 0.5),
                                        ("examples/mechanisms/slider_crank_driven.toml", 0.5),
                                        ("examples/mechanisms/engine_inline_four.toml", 0.02)])  # 3000 rpm
def test_sparse_inverse_dynamics_is_the_dense_one_on_shipped_mechanisms(
        path: str, span: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sparse sweep forced onto shipped DOF-0 mechanisms (below SPARSE_MIN they keep the dense
    one): every output column within round-off of the dense path's."""
    sparse, dense = _both_paths(mt.load_mechanism(ROOT / path), np.linspace(0.0, span, 51), monkeypatch, 0)
    assert sparse.columns == dense.columns
    scale = np.abs(dense.data).max(axis=0) + 1.0
    assert (np.abs(sparse.data - dense.data) <= 1e-9 * scale).all()


def test_sparse_inverse_dynamics_is_the_dense_one_above_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 110-link chain turning as one bar at 2 rad/s (330 coordinates, above SPARSE_MIN): the
    sparse sweep against the dense one."""
    sparse, dense = _both_paths(driven_chain(110, 2.0), np.linspace(0.0, 0.2, 11), monkeypatch, linsolve.SPARSE_MIN)
    assert sparse.columns == dense.columns
    assert np.abs(sparse.data - dense.data).max() <= 1e-9 * np.abs(dense.data).max()


def test_inverse_dynamics_of_a_1000_link_chain_held_horizontal() -> None:
    """Statics by hand: link k carries the links beyond it, so its hinge pushes it up with
    m·g·(N − k) and its driver holds m·g·L·(N − k − ½) (the weights beyond at L and its own at
    L/2 about its hinge)."""
    n, m, g, L = 1000, 0.1, 9.81, 0.1
    mech = driven_chain(n)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = mt.inverse_dynamics(mech, np.linspace(0.0, 0.1, 11))
    assert time.perf_counter() - start < 60.0  # about 2 s (benchmarks/bench_scale.py)
    col = {c: i for i, c in enumerate(res.columns)}
    k = np.arange(n)
    effort = res.data[:, [col[f"d{i}.effort"] for i in k]]
    fy = res.data[:, [col[f"j{i}.fy"] for i in k]]
    fx = res.data[:, [col[f"j{i}.fx"] for i in k]]
    assert np.allclose(effort, m * g * L * (n - k - 0.5), rtol=1e-9, atol=1e-9)
    assert np.allclose(fy, m * g * (n - k), rtol=1e-9, atol=1e-9)
    assert np.abs(fx).max() < 1e-9
