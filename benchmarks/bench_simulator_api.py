"""Cost of the Simulator calls a Kalman filter makes at every 1 kHz sample, in µs per call (best of
N repetitions), on the bundled slider crank (compiled backend unless --numpy):

snapshot / restore, set_parameter per parameter kind (with the state kept and with the default
reset; a spring-damper is added to the crank for stiffness/damping), set_configuration, get_state,
set_state and advance_to by 1 ms with an input that changes at every call.

Run: python benchmarks/bench_simulator_api.py [--repeat N] [--numpy]
Calls that the installed version lacks print "n/a" (so the script also measures older versions).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from collections.abc import Callable

import mbsd_twin as mt
from mbsd_twin.model.loader import bundled_slider_crank

PARAMS = (("piston.mass", 1.5, 1.6), ("crank.inertia", 8.333e-4, 9e-4), ("rod.cg_x", 0.15, 0.14),
          ("main_bearing.viscous_friction", 0.05, 0.06), ("spring.stiffness", 50.0, 60.0),
          ("spring.damping", 0.3, 0.4), ("crank_pin.p1_x", 0.1, 0.1001))


def mechanism() -> mt.Mechanism:
    mech = mt.load_mechanism(bundled_slider_crank())
    spring = mt.Load("spring", "spring_damper", ("ground", "piston"), points=((0.6, 0.0), (0.0, 0.0)),
                     stiffness=50.0, damping=0.3)
    return dataclasses.replace(mech, loads=(*mech.loads, spring))


def best_us(call: Callable[[], object], repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


def measure(name: str, call: Callable[[], object], repeat: int) -> None:
    try:
        call()
    except TypeError as exc:  # an older Simulator without this call or keyword
        print(f"{name:<52} n/a ({exc})")
        return
    print(f"{name:<52} {best_us(call, repeat):10.1f} µs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--numpy", action="store_true", help="the numpy backend instead of the compiled one")
    args = ap.parse_args()
    opts = mt.SolverOptions(backend="numpy" if args.numpy else "compiled")
    sim = mt.Simulator(mechanism(), opts)
    sim.set_input("motor_torque", 1.0)
    sim.advance_to(0.05)
    r = args.repeat
    print(f"bundled slider crank (+ spring), backend {opts.backend}, best of {r} [µs per call]")
    if hasattr(sim, "snapshot"):
        snap = sim.snapshot()
        measure("snapshot()", sim.snapshot, r)
        measure("restore(snap)", lambda: sim.restore(snap), r)
    else:
        print(f"{'snapshot() / restore(snap)':<52} n/a")
    for name, a, b in PARAMS:
        rr = 5 if name == "crank_pin.p1_x" else r  # a rebuild: milliseconds
        flip = iter([a, b] * (rr + 2))
        measure(f"set_parameter({name!r}, keep_state=True)",
                lambda n=name, f=flip: sim.set_parameter(n, next(f), keep_state=True), rr)
        sim.advance_to(sim.time + 0.01)
        measure(f"set_parameter({name!r})", lambda n=name, f=flip: sim.set_parameter(n, next(f)), rr)
        sim.set_input("motor_torque", 1.0)
        sim.advance_to(0.05)
    th = sim.get_output("crank.theta")
    measure("set_configuration(crank.theta, crank.omega)",
            lambda: sim.set_configuration({"crank.theta": th}, {"crank.omega": 3.0}), r)
    measure("get_state()", sim.get_state, r)
    blob = sim.get_state()
    measure("set_state(blob)", lambda: sim.set_state(blob), r)
    k = iter(range(10**9))

    def advance() -> None:
        sim.set_input("motor_torque", 1.0 + 0.1 * math.sin(next(k)))
        sim.advance_to(sim.time + 1e-3)

    measure("set_input + advance_to(t + 1 ms)", advance, r)


if __name__ == "__main__":
    main()
