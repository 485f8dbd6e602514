"""``check`` and inverse dynamics of large mechanisms for benchmarks/bench_scale.py (issue #33):
``check`` (assembly, DOF by rank, redundant rows) of the 1000-link chain, of the ladder of 100
four-bar loops and of the 1000-link chain with its first link hinged to ground a second time (two
redundant rows); inverse dynamics (and its kinematics) of the 1000-link chain with every link's
angle driven at 2 rad/s (DOF 0), 0.1 s in 11 points, in wall per point."""

from __future__ import annotations

import time

import numpy as np
from large_mechanisms import chain, driven_chain, hanging_ladder

import mbsd_twin as mt


def pinned_twice(n: int) -> mt.Mechanism:
    b = mt.MechanismBuilder("chain-pinned-twice")
    prev = "ground"
    for i in range(n):
        b.body(f"link{i}", 0.1, 0.1 * 0.01 / 12, cg=(0.05, 0.0), position=(0.1 * i, 0.0))
        b.revolute(f"j{i}", prev, f"link{i}", (0.1, 0.0) if i else (0.0, 0.0), (0.0, 0.0))
        prev = f"link{i}"
    b.revolute("again", "ground", "link0", (0.0, 0.0), (0.0, 0.0))
    return b.build()


def report() -> None:
    for name, mech in (("chain1000", chain(1000)), ("ladder100", hanging_ladder(100)),
                       ("chain1000 pinned twice", pinned_twice(1000))):
        system = mt.compile_mechanism(mech)
        start = time.perf_counter()
        rep = mt.check(system)
        print(f"check {name:24s} {time.perf_counter() - start:7.3f} s  DOF {rep.dof}, redundant "
              f"{rep.redundant_constraints or 'none'}", flush=True)
    t = np.linspace(0.0, 0.1, 11)
    for what, fn in (("kinematics", mt.kinematics), ("inverse dynamics", mt.inverse_dynamics)):
        system = mt.compile_mechanism(driven_chain(1000, 2.0))
        start = time.perf_counter()
        fn(system, t)
        wall = time.perf_counter() - start
        print(f"{what} driven chain1000, 11 points: {wall:7.3f} s ({wall / len(t) * 1e3:.0f} ms per point)",
              flush=True)
