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

- peers (only where importable; neither is a dependency): the chain's wall per simulated second
  in Exudyn (generalised-alpha) and MuJoCo (RK4, implicitfast) at 1 ms over the same span, as a
  ratio to ours in the same run (> 1: slower than mbsd-twin), see benchmarks/scale_peers.py;
- ``check`` of the 1000-link chain, the 100-loop ladder and a 1000-link chain with two redundant
  rows, and inverse dynamics of a driven 1000-link chain, see benchmarks/scale_analysis.py;
- the FMU builds of the 1000-link chain (``--fmu``): ``mbsd-twin fmu build`` (PythonFMU) and
  ``--standalone``, and the PythonFMU FMU's instantiation through fmpy, see
  benchmarks/scale_fmu.py.

Run: python benchmarks/bench_scale.py [--sizes 10 30 100 300 1000] [--span 1.0] [--repeat 1]
     [--no-peers] [--fmu]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import mbsd_twin as mt
from mbsd_twin.physics.system import compile_mechanism
from mbsd_twin.solvers.assembly import assemble

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from large_mechanisms import chain, free_bodies, hanging_ladder  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale_analysis  # noqa: E402
import scale_peers  # noqa: E402


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


def row(n: int, span: float, repeat: int, peers: bool) -> str:
    sim, build = timed_build(chain(n), repeat)
    _, bent_build = timed_build(chain(n, 0.1), repeat)
    assembly, residual = timed_assembly(chain(n, 0.1), repeat)
    span_n = span if n <= 300 else span / 5
    per_s, drift = stepping(sim, span_n)
    free, free_build = timed_build(free_bodies(n), repeat)
    free_per_s, _ = stepping(free, span_n)
    loops = max(1, n // 3)  # about n bodies
    lad, lad_build = timed_build(hanging_ladder(loops), repeat)
    lad_per_s, _ = stepping(lad, span_n)
    ratios = scale_peers.ratios(n, span_n, per_s) if peers else ""
    return (f"{n:5d} {build:9.3f} {assembly:9.3f} {residual:9.1e} {bent_build:9.3f} {per_s:9.3f} {drift:10.1e} "
            f"{free_build:9.3f} {free_per_s:9.4f} {loops:5d} {lad_build:9.3f} {lad_per_s:9.3f} {ratios}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 30, 100, 300, 1000])
    ap.add_argument("--span", type=float, default=1.0, help="simulated span [s] (a fifth of it at N > 300)")
    ap.add_argument("--repeat", type=int, default=1, help="builds per figure (the best is shown)")
    ap.add_argument("--no-peers", action="store_true", help="without the Exudyn / MuJoCo ratios")
    ap.add_argument("--fmu", action="store_true", help="also time the FMU builds of the 1000-link chain")
    args = ap.parse_args()
    peers = not args.no_peers and any(scale_peers.available().values())
    warnings.simplefilter("ignore")
    for n in (2, 30):  # the compiled kernels loaded and the dense solvers used once, outside the figures
        mt.Simulator(chain(n, 0.1))
    print("    N  build[s] assembly[s] max|C|[m] bent:build[s] wall/sim-s  drift[J] free:build[s] wall/sim-s"
          " loops ladder:build[s] wall/sim-s" + ("  peer/ours: exudyn mujoco-rk4 mujoco-implicitfast" if peers else ""))
    for n in args.sizes:
        print(row(n, args.span, args.repeat, peers), flush=True)
    scale_analysis.report()
    if args.fmu:
        import scale_fmu

        scale_fmu.report(1000)


if __name__ == "__main__":
    main()
