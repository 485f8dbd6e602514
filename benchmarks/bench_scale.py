"""Large mechanisms (issue #33): an N-link planar pendulum chain (0.1 m, 0.1 kg slender links,
hinged end to end from the origin, released horizontal) and N unconnected free bodies, for
N = 10, 30, 100, 300, 1000 (targets at N = 1000: build <= 1 s, assembly <= 1 s, 1 s simulated
at 1 ms in <= 2 s wall; 300 free bodies built in <= 0.1 s).

Per N, each in a fresh Simulator after the compiled kernels are loaded:
- build: ``Simulator(mechanism)`` of the chain as written (assembled already) [s];
- assembly: ``assemble`` of the chain with every joint 0.1 rad off (link i turned by 0.1·(i+1)
  rad at the straight chain's positions) [s], its residual max|C| [m], and the build of that
  chain's Simulator (which assembles it) [s];
- wall per simulated second: ``advance_to`` in 1 ms steps over ``--span`` s (shorter for large
  N, scaled to 1 s) [s], and the drift of ``energy.total`` over that span [J];
- the same build and stepping for N free bodies (gravity, no joints) and for a ladder of N/3
  four-bar loops (3 bodies per loop, closed loops: target at 100 loops build <= 1 s, stepping
  cost per body within 2x of the chain's).

Run: python benchmarks/bench_scale.py [--sizes 10 30 100 300 1000] [--span 1.0] [--repeat 1]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np

import mbsd_twin as mt
from mbsd_twin.physics.system import compile_mechanism
from mbsd_twin.solvers.assembly import assemble


def chain(n: int, off: float = 0.0) -> mt.Mechanism:
    """n links along +x from the origin; ``off``: link i turned by off·(i+1) [rad] in place (every
    joint violated by ``off``)."""
    b = mt.MechanismBuilder(f"chain{n}")
    prev = "ground"
    for i in range(n):
        b.body(f"link{i}", 0.1, 0.1 * 0.01 / 12, cg=(0.05, 0.0), position=(0.1 * i, 0.0), angle=off * (i + 1))
        b.revolute(f"j{i}", prev, f"link{i}", (0.1, 0.0) if i else (0.0, 0.0), (0.0, 0.0))
        prev = f"link{i}"
    return b.build()


def free_bodies(n: int) -> mt.Mechanism:
    b = mt.MechanismBuilder(f"free{n}")
    for i in range(n):
        b.body(f"b{i}", 0.1, 1e-3, position=(0.2 * i, 0.0))
    return b.build()


def ladder(loops: int) -> mt.Mechanism:
    """``loops`` four-bar parallelograms stacked downwards (1 m bars, 1 kg), hanging 0.1 rad off
    the vertical: two rails of bars hinged end to end, a rung across each level; closed loops,
    one degree of freedom each (released at rest, they swing without reaching the collapsed,
    singular pose)."""
    b = mt.MechanismBuilder(f"ladder{loops}")
    below, s, c = ("ground", "ground"), math.sin(0.1), math.cos(0.1)
    for i in range(loops):
        left, right, rung = f"l{i}", f"r{i}", f"rung{i}"
        b.body(left, 1.0, 0.1, position=(i * s, -i * c), angle=-math.pi / 2 + 0.1)
        b.body(right, 1.0, 0.1, position=(1.0 + i * s, -i * c), angle=-math.pi / 2 + 0.1)
        b.revolute(f"jl{i}", below[0], left, (1.0, 0.0) if i else (0.0, 0.0), (0.0, 0.0))
        b.revolute(f"jr{i}", below[1], right, (1.0, 0.0), (0.0, 0.0))
        b.body(rung, 1.0, 0.1, position=((i + 1) * s, -(i + 1) * c))
        b.revolute(f"rl{i}", left, rung, (1.0, 0.0), (0.0, 0.0))
        b.revolute(f"rr{i}", right, rung, (1.0, 0.0), (1.0, 0.0))
        below = (left, right)
    return b.build()


def timed_build(mech: mt.Mechanism, repeat: int) -> tuple[mt.Simulator, float]:
    best, sim = np.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        sim = mt.Simulator(mech)
        best = min(best, time.perf_counter() - start)
    assert sim is not None
    return sim, best


def timed_assembly(mech: mt.Mechanism, repeat: int) -> tuple[float, float]:
    """(best wall [s] of ``assemble`` from the mechanism's own pose on a fresh System, max|C| [m])."""
    best, q = np.inf, None
    for _ in range(repeat):
        system = compile_mechanism(mech)
        start = time.perf_counter()
        q = assemble(system, None, 0.0)
        best = min(best, time.perf_counter() - start)
    assert q is not None
    return best, float(np.abs(system.constraints(q, 0.0)).max())


def stepping(sim: mt.Simulator, span: float) -> tuple[float, float]:
    """(wall [s] per simulated second in 1 ms steps, energy drift [J]) over ``span`` s."""
    e0 = sim.get_output("energy.total")
    steps = max(1, round(span / 1e-3))
    start = time.perf_counter()
    for k in range(1, steps + 1):
        sim.advance_to(k * 1e-3)
    wall = time.perf_counter() - start
    return wall / (steps * 1e-3), sim.get_output("energy.total") - e0


def row(n: int, span: float, repeat: int) -> str:
    sim, build = timed_build(chain(n), repeat)
    _, bent_build = timed_build(chain(n, 0.1), repeat)
    assembly, residual = timed_assembly(chain(n, 0.1), repeat)
    span_n = span if n <= 300 else span / 5
    per_s, drift = stepping(sim, span_n)
    free, free_build = timed_build(free_bodies(n), repeat)
    free_per_s, _ = stepping(free, span_n)
    loops = max(1, n // 3)  # about n bodies
    lad, lad_build = timed_build(ladder(loops), repeat)
    lad_per_s, _ = stepping(lad, span_n)
    return (f"{n:5d} {build:9.3f} {assembly:9.3f} {residual:9.1e} {bent_build:9.3f} {per_s:9.3f} {drift:10.1e} "
            f"{free_build:9.3f} {free_per_s:9.4f} {loops:5d} {lad_build:9.3f} {lad_per_s:9.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 30, 100, 300, 1000])
    ap.add_argument("--span", type=float, default=1.0, help="simulated span [s] (a fifth of it at N > 300)")
    ap.add_argument("--repeat", type=int, default=1, help="builds per figure (the best is shown)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    for n in (2, 30):  # the compiled kernels loaded and the dense solvers used once, outside the figures
        mt.Simulator(chain(n, 0.1))
    print("    N  build[s] assembly[s] max|C|[m] bent:build[s] wall/sim-s  drift[J] free:build[s] wall/sim-s"
          " loops ladder:build[s] wall/sim-s")
    for n in args.sizes:
        print(row(n, args.span, args.repeat), flush=True)


if __name__ == "__main__":
    main()
