"""Forward-dynamics speed (issue targets in brackets).

1. Four-bar of slender bars (0.8 / 2.0 / 1.0 m links, ground 2.0 m, 1 kg each, I = mL²/12),
   released at rest at 10°, 30 s: wall time [< 0.3 s], crank-angle error against a tight reference
   [< 1e-6 rad], constraint residual [< 1e-10].
2. Simulator.advance_to in 1 ms steps on slider_crank.toml with motor torque 2 N·m: real-time
   factor [>= 100] and crank-angle error against a tight reference [< 1e-6 rad].
3. Chain of N pendulum links: cost per right-hand-side evaluation for N = 2, 8, 32, 128 [O(N),
   <= 1 ms at N = 128].
4. Simulator.advance_to in 1 ms steps on the mechanisms with a knife edge (chaplygin_sleigh.toml)
   and a cam (cam_follower.toml): real-time factor on the compiled path [>= 100] and on the numpy
   path (which they used before issue #16 compiled these joints; a short run, it is slow), and the
   largest position difference between the two.

Run: python benchmarks/bench_forward.py [--quick]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from numba import njit

import mbsd_twin as mt
from mbsd_twin.compiled import nb_dop853 as nd
from mbsd_twin.compiled.fastpath import CompiledStepper
from mbsd_twin.compiled.nb_indirect import table
from mbsd_twin.solvers.dynamics import Dynamics

ROOT = Path(__file__).resolve().parents[1]


def four_bar() -> mt.Mechanism:
    b = mt.MechanismBuilder("four-bar")
    th = np.radians(10.0)
    a = np.array([0.8 * np.cos(th), 0.8 * np.sin(th)])
    d = np.hypot(2.0 - a[0], a[1])
    gam = np.arctan2(-a[1], 2.0 - a[0])
    beta = np.arccos((d * d + 2.0**2 - 1.0**2) / (2 * d * 2.0))
    phi = gam + beta
    c = a + 2.0 * np.array([np.cos(phi), np.sin(phi)])
    psi = np.arctan2(c[1], c[0] - 2.0)
    for name, L, pos, ang in (("crank", 0.8, (0, 0), th), ("coupler", 2.0, a, phi), ("rocker", 1.0, (2.0, 0.0), psi)):
        b.body(name, 1.0, L * L / 12.0, cg=(L / 2, 0.0), position=pos, angle=ang)
    b.revolute("A", "ground", "crank", (0, 0), (0, 0))
    b.revolute("B", "crank", "coupler", (0.8, 0), (0, 0))
    b.revolute("C", "coupler", "rocker", (2.0, 0), (1.0, 0))
    b.revolute("D", "ground", "rocker", (2.0, 0), (0, 0))
    return b.build()


def chain(n: int) -> mt.Mechanism:
    b = mt.MechanismBuilder(f"chain-{n}")
    for k in range(n):
        b.body(f"l{k}", 1.0, 1.0 / 12, cg=(0.5, 0.0), position=(float(k), 0.0))
        b.revolute(f"j{k}", "ground" if k == 0 else f"l{k - 1}", f"l{k}", (0, 0) if k == 0 else (1.0, 0), (0, 0))
    return b.build()


def bench_four_bar() -> None:
    """Default options, then rtol 1e-9 (the integrator keeps its own steps across the 10 ms output
    points, so the global error is the method's at that tolerance)."""
    mech = four_bar()
    ref = mt.simulate(mech, 30.0, 0.01, options=mt.SolverOptions(rtol=1e-12, atol=1e-14))
    for label, opts in (("default options", mt.SolverOptions()), ("rtol=1e-9", mt.SolverOptions(rtol=1e-9))):
        t0 = time.perf_counter()
        res = mt.simulate(mech, 30.0, 0.01, options=opts)
        wall = time.perf_counter() - t0
        err = np.abs(res["crank.theta"] - ref["crank.theta"]).max()
        print(f"four-bar 30 s, {label}: wall {wall:.3f} s [target < 0.3 s], crank-angle error {err:.2e} rad "
              f"[< 1e-6], max residual {res['constraints.position_residual'].max():.1e} [< 1e-10], "
              f"|balance error| {np.abs(res['energy.balance_error']).max():.1e} J")


def bench_simulator(t_end: float, repeat: int) -> None:
    """Default options, then the two step-size settings they replace (scipy's rms norm; the energy
    integrals in the error control). Wall time: the best of ``repeat`` runs (the machine's noise
    only ever adds time)."""
    mech = mt.load_mechanism(ROOT / "examples/mechanisms/slider_crank.toml")
    ref = mt.simulate(mech, t_end, 0.01, inputs={"motor_torque": 2.0},
                      options=mt.SolverOptions(rtol=1e-12, atol=1e-14))
    n = int(round(t_end / 1e-3))
    for label, opts in (("default options", mt.SolverOptions()),
                        ("error_norm='rms'", mt.SolverOptions(error_norm="rms")),
                        ("energy_error_control=True", mt.SolverOptions(energy_error_control=True))):
        walls = []
        for _ in range(repeat):
            sim = mt.Simulator(mech, opts)
            sim.set_input("motor_torque", 2.0)
            theta = np.empty(n)
            t0 = time.perf_counter()
            for k in range(1, n + 1):
                sim.advance_to(k * 1e-3)
                theta[k - 1] = sim.get_output("crank.theta")
            walls.append(time.perf_counter() - t0)
        wall = min(walls)
        err = np.abs(theta[9::10] - ref["crank.theta"][1:]).max()
        print(f"Simulator 1 ms steps, slider crank, {t_end:g} s, {label}: {wall / n * 1e6:.1f} us per step "
              f"(best of {repeat}; median {np.median(walls) / n * 1e6:.1f}), real-time factor {t_end / wall:.1f} "
              f"[target >= 100], crank-angle error {err:.2e} rad [< 1e-6], "
              f"{sim.outputs()['energy.balance_error']:.1e} J balance error, {sim._stepper.steps} internal steps")


@njit(cache=False)  # not cached: its code embeds the engine kernels, which change
def _rhs_loop(reps: int, t: float, y: np.ndarray, cb: np.ndarray) -> float:
    """Right-hand sides as the integrator evaluates them: through the stepper's address table and
    the context it pinned in ``cb`` (its workspace, reused)."""
    dy = np.empty_like(y)
    ctx = table(cb)
    acc = 0.0
    for _ in range(reps):
        nd.rhs_at(t, y, dy, ctx)
        acc += dy[0]
    return acc


def bench_chain(sizes: list[int]) -> None:
    for n in sizes:
        mech = chain(n)
        dyn = Dynamics(mt.compile_mechanism(mech), mt.SolverOptions())
        y = dyn.initial_state()
        reps = max(5, 2000 // n)
        dyn.rhs(0.0, y, {})
        t0 = time.perf_counter()
        for _ in range(reps):
            dyn.rhs(0.0, y, {})
        cost_np = (time.perf_counter() - t0) / reps
        st = CompiledStepper(dyn, 0.0, y, {})
        creps = max(100, 200_000 // n)
        _rhs_loop(2, 0.0, y, st._cb)
        t0 = time.perf_counter()
        _rhs_loop(creps, 0.0, y, st._cb)
        cost_nb = (time.perf_counter() - t0) / creps
        print(f"chain N={n:4d}: compiled {cost_nb * 1e6:8.1f} us, numpy {cost_np * 1e3:7.3f} ms per RHS "
              f"evaluation [target O(N), <= 1 ms at N = 128]")


def _rtf(mech: mt.Mechanism, opts: mt.SolverOptions, t_end: float, repeat: int) -> tuple[float, str, np.ndarray]:
    """Best-of-``repeat`` real-time factor of 1 ms Simulator steps reading one output per step (as
    bench_simulator), the backend and the final coordinates."""
    n, walls = int(round(t_end / 1e-3)), []
    for _ in range(repeat):
        sim = mt.Simulator(mech, opts)
        name = sim.system.coordinate_names[2]
        t0 = time.perf_counter()
        for k in range(1, n + 1):
            sim.advance_to(k * 1e-3)
            sim.get_output(name)
        walls.append(time.perf_counter() - t0)
    return t_end / min(walls), sim.backend, np.asarray(sim._stepper.y)[:sim.system.n_coord].copy()


def bench_joints(t_end: float, repeat: int) -> None:
    for name in ("chaplygin_sleigh", "cam_follower"):
        mech = mt.load_mechanism(ROOT / f"examples/mechanisms/{name}.toml")
        rtf, backend, q = _rtf(mech, mt.SolverOptions(), t_end, repeat)
        rtf_np, backend_np, _ = _rtf(mech, mt.SolverOptions(backend="numpy"), min(t_end, 0.2), 1)
        _, _, q_np = _rtf(mech, mt.SolverOptions(backend="numpy", rtol=1e-10, atol=1e-12), t_end, 1)
        print(f"Simulator 1 ms steps, {name}, {t_end:g} s: {backend} real-time factor {rtf:.0f} [target >= 100] "
              f"(best of {repeat}); {backend_np} {rtf_np:.2f} (0.2 s); largest coordinate difference to the numpy "
              f"path at rtol 1e-10 {np.abs(q - q_np).max():.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="shorter simulator run")
    ap.add_argument("--repeat", type=int, default=3, help="simulator runs per setting (best is reported)")
    args = ap.parse_args()
    bench_four_bar()
    bench_simulator(1.0 if args.quick else 10.0, args.repeat)
    bench_chain([2, 8, 32, 128])
    bench_joints(1.0 if args.quick else 2.0, args.repeat)


if __name__ == "__main__":
    main()
