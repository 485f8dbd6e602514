"""The choice of free coordinates (the ``*_start`` parameters, issue #33): pinned on every shipped
mechanism and a few built ones (names recorded from the dense per-candidate SVD of b08903f), and
checked against that definition, evaluated here by dense SVDs, on built mechanisms."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from large_mechanisms import chain, free_bodies

import mbsd_twin as mt
from mbsd_twin.physics.system import compile_mechanism
from mbsd_twin.simulation.start_values import NO_SLIP, free_coordinates
from mbsd_twin.solvers.kinematics import KinematicsOptions, assemble
from mbsd_twin.solvers.newton import rank_info, redundant_rows

ROOT = Path(__file__).resolve().parents[1]

PINNED = {
    "examples/mechanisms/cam_follower.toml": [],
    "examples/mechanisms/chaplygin_sleigh.toml": [
        "sleigh.theta_start",
        "sleigh.x_start",
        "sleigh.y_start",
        "sleigh.omega_start",
        "sleigh.vx_start",
    ],
    "examples/mechanisms/double_pendulum.toml": [
        "upper.theta_start",
        "lower.theta_start",
        "upper.omega_start",
        "lower.omega_start",
    ],
    "examples/mechanisms/engine_boxer.toml": [],
    "examples/mechanisms/engine_inline_four.toml": [],
    "examples/mechanisms/engine_single_cylinder.toml": [],
    "examples/mechanisms/four_bar.toml": ["crank.theta_start", "crank.omega_start"],
    "examples/mechanisms/four_bar_bicycle_leg.toml": [],
    "examples/mechanisms/four_bar_driven.toml": [],
    "examples/mechanisms/geneva_drive.toml": [],
    "examples/mechanisms/mass_spring_damper.toml": ["block.x_start", "block.vx_start"],
    "examples/mechanisms/pantograph.toml": [],
    "examples/mechanisms/pendulum.toml": ["bar.theta_start", "bar.omega_start"],
    "examples/mechanisms/planetary_gear.toml": ["sun.theta_start", "sun.omega_start"],
    "examples/mechanisms/quick_return.toml": ["crank.theta_start", "crank.omega_start"],
    "examples/mechanisms/scotch_yoke.toml": [],
    "examples/mechanisms/slider_crank.toml": ["crank.theta_start", "crank.omega_start"],
    "examples/mechanisms/slider_crank_driven.toml": [],
    "examples/mechanisms/terrain_wheel.toml": [
        "wheel.theta_start",
        "wheel.x_start",
        "wheel.y_start",
        "body.y_start",
        "wheel.omega_start",
        "wheel.vx_start",
        "wheel.vy_start",
        "body.vy_start",
    ],
    "examples/mechanisms/terrain_wheel_polygonal.toml": [
        "wheel.theta_start",
        "wheel.x_start",
        "wheel.y_start",
        "body.y_start",
        "wheel.omega_start",
        "wheel.vx_start",
        "wheel.vy_start",
        "body.vy_start",
    ],
    "mbsd_twin/data/mechanisms/pendulum_driven.toml": ["bar.theta_start", "bar.omega_start"],
    "mbsd_twin/data/mechanisms/slider_crank.toml": ["crank.theta_start", "crank.omega_start"],
}


def mixed() -> mt.Mechanism:
    """A pendulum, a free body and a pendulum hanging from a slider on a guide."""
    b = mt.MechanismBuilder("mixed")
    b.body("a", 1.0, 0.1, cg=(0.5, 0.0), position=(0.0, 0.0), angle=0.3)
    b.revolute("pa", "ground", "a", (0.0, 0.0), (0.0, 0.0))
    b.body("free", 1.0, 0.1, position=(3.0, 1.0))
    b.body("slider", 1.0, 0.1, position=(0.0, -2.0))
    b.prismatic("guide", "ground", "slider", (0.0, -2.0), (0.0, 0.0), axis=(1.0, 0.0))
    b.body("rod", 1.0, 0.1, cg=(0.5, 0.0), position=(0.0, -2.0), angle=0.5)
    b.revolute("pr", "slider", "rod", (0.0, 0.0), (0.0, 0.0))
    return b.build()


def ladder(n: int) -> mt.Mechanism:
    """n four-bar loops stacked: rungs between two rails of bars hinged on each other."""
    b = mt.MechanismBuilder(f"ladder{n}")
    below, s, c = ("ground", "ground"), math.sin(0.1), math.cos(0.1)
    for i in range(n):
        left, right, rung = f"l{i}", f"r{i}", f"rung{i}"
        b.body(left, 1.0, 0.1, position=(-i * s, i * c), angle=math.pi / 2 + 0.1)
        b.body(right, 1.0, 0.1, position=(1.0 - i * s, i * c), angle=math.pi / 2 + 0.1)
        b.revolute(f"jl{i}", below[0], left, (1.0, 0.0) if i else (0.0, 0.0), (0.0, 0.0))
        b.revolute(f"jr{i}", below[1], right, (1.0, 0.0), (0.0, 0.0))
        b.body(rung, 1.0, 0.1, position=(-(i + 1) * s, (i + 1) * c))
        b.revolute(f"rl{i}", left, rung, (1.0, 0.0), (0.0, 0.0))
        b.revolute(f"rr{i}", right, rung, (1.0, 0.0), (1.0, 0.0))
        below = (left, right)
    return b.build()


BUILT = {
    "chain(5)": chain(5),
    "free_bodies(3)": free_bodies(3),
    "mixed()": mixed(),
    "ladder(3)": ladder(3),
}
PINNED_BUILT = {
    "chain(5)": [
        "link0.theta_start",
        "link1.theta_start",
        "link2.theta_start",
        "link3.theta_start",
        "link4.theta_start",
        "link0.omega_start",
        "link1.omega_start",
        "link2.omega_start",
        "link3.omega_start",
        "link4.omega_start",
    ],
    "free_bodies(3)": [
        "b0.theta_start",
        "b1.theta_start",
        "b2.theta_start",
        "b0.x_start",
        "b1.x_start",
        "b2.x_start",
        "b0.y_start",
        "b1.y_start",
        "b2.y_start",
        "b0.omega_start",
        "b1.omega_start",
        "b2.omega_start",
        "b0.vx_start",
        "b1.vx_start",
        "b2.vx_start",
        "b0.vy_start",
        "b1.vy_start",
        "b2.vy_start",
    ],
    "mixed()": [
        "a.theta_start",
        "free.theta_start",
        "rod.theta_start",
        "free.x_start",
        "slider.x_start",
        "free.y_start",
        "a.omega_start",
        "free.omega_start",
        "rod.omega_start",
        "free.vx_start",
        "slider.vx_start",
        "free.vy_start",
    ],
    "ladder(3)": [
        "l0.theta_start",
        "l1.theta_start",
        "l2.theta_start",
        "l0.omega_start",
        "l1.omega_start",
        "l2.omega_start",
    ],
}


def _starts(mech: mt.Mechanism) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = mt.Simulator(mech)
    return [p.name for p in sim.parameters if p.name.endswith("_start")]


@pytest.mark.parametrize("path", sorted(PINNED))
def test_shipped_start_parameters_are_pinned(path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mech = mt.load_mechanism(ROOT / path)
    assert _starts(mech) == PINNED[path]


@pytest.mark.parametrize("name", sorted(BUILT))
def test_built_start_parameters_are_pinned(name: str) -> None:
    assert _starts(BUILT[name]) == PINNED_BUILT[name]


def _dense_rank(a: np.ndarray) -> int:
    if a.size == 0:
        return 0
    s = np.linalg.svd(a, compute_uv=False)
    return int((s > 1e-9 * max(float(s[0]), 1e-300)).sum())


def _dense_choice(jac: np.ndarray, candidates: list[int]) -> list[int]:
    """The definition: keep a candidate when holding it with those kept raises the rank of the
    Jacobian stacked with the held coordinates' unit rows (one dense SVD per candidate)."""
    n = jac.shape[1]
    base, kept = _dense_rank(jac), list[int]()
    for k in candidates:
        held = np.zeros((len(kept) + 1, n))
        held[np.arange(len(kept) + 1), [*kept, k]] = 1.0
        if _dense_rank(np.vstack([jac, held])) == base + len(kept) + 1:
            kept.append(k)
    return kept


CHECKED = [
    chain(12),
    mixed(),
    ladder(4),
    "examples/mechanisms/chaplygin_sleigh.toml",
    "examples/mechanisms/terrain_wheel.toml",
    "examples/mechanisms/planetary_gear.toml",
    "examples/mechanisms/four_bar.toml",
    "examples/mechanisms/quick_return.toml",
]


@pytest.mark.parametrize("mech", CHECKED, ids=lambda m: m if isinstance(m, str) else m.name)
def test_choice_matches_the_dense_definition(mech: mt.Mechanism | str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = mt.Simulator(mt.load_mechanism(ROOT / mech) if isinstance(mech, str) else mech)
    system, rows = sim.system, sim._dyn.rows
    nb = system.n_body
    candidates = [3 * b + 2 for b in range(nb)] + [3 * b for b in range(nb)] + [3 * b + 1 for b in range(nb)]
    rng = np.random.default_rng(33)
    q0 = sim._y0[: system.n_coord]
    for q in (q0, q0 + 0.05 * rng.standard_normal(q0.shape)):  # at the assembly and off it
        jac = system.jacobian(q, 0.0)[rows]
        holonomic = [k for k, r in enumerate(rows) if not system.constraint_names[int(r)].endswith(NO_SLIP)]
        expected = (_dense_choice(jac[holonomic], candidates), _dense_choice(jac, candidates))
        assert free_coordinates(system, q, 0.0, rows) == expected


def doubly_pinned() -> mt.Mechanism:
    """A bar hinged to ground twice at the same point: two redundant rows."""
    b = mt.MechanismBuilder("doubly-pinned")
    b.body("bar", 1.0, 0.1, cg=(0.5, 0.0))
    b.revolute("pin", "ground", "bar", (0.0, 0.0), (0.0, 0.0))
    b.revolute("again", "ground", "bar", (0.0, 0.0), (0.0, 0.0))
    return b.build()


@pytest.mark.parametrize("mech", [*sorted(PINNED), *BUILT.values(), ladder(6), doubly_pinned()],
                         ids=lambda m: m if isinstance(m, str) else m.name)
def test_redundant_rows_match_the_dense_rank(mech: mt.Mechanism | str) -> None:
    """The simulator's rows: the sparse shortcut agrees with the SVD rank and pivoted QR."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        system = compile_mechanism(mt.load_mechanism(ROOT / mech) if isinstance(mech, str) else mech)
        q = assemble(system, None, 0.0, KinematicsOptions())
    assert redundant_rows(system, q, 0.0) == rank_info(system, q, 0.0).redundant_rows
    if isinstance(mech, mt.Mechanism) and mech.name == "doubly-pinned":
        assert len(rank_info(system, q, 0.0).redundant_rows) == 2
