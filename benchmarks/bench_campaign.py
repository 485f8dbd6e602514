"""Campaign throughput (issue #19 item 3): wall time of a 16-task sweep (the undamped mass-spring
oscillator over 4 stiffnesses × 4 masses, 20 s each at 1 ms output) on 1 and 2 workers of the local
process pool, and on a local two-node Ray cluster (one CPU per node, started and stopped here by
:class:`~mbsd_twin.campaign.local_cluster.LocalRayCluster`) with 1 and 2 tasks in flight. The wall
time counts the pool workers' start (spawn, imports, numba's disk cache) as a campaign run does;
Ray's workers stay up between runs. The best of ``--repeat`` runs is printed. On a
2-core machine the ideal speed-up of 2 workers is 2×.

    .venv/bin/python benchmarks/bench_campaign.py [--duration 20] [--repeat 2] [--no-ray]
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from pathlib import Path

from mbsd_twin.campaign import PoolBackend, RayBackend, load_campaign, run_campaign
from mbsd_twin.campaign.local_cluster import LocalRayCluster

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = """name = "bench"
[[jobs]]
kind = "sweep"
name = "spring"
mechanism = "{mech}"
duration = {duration}
outputs = ["block.x"]
statistics = ["period"]
fixed = {{ "spring.damping" = 0.0 }}
[jobs.grid]
"spring.stiffness" = [100.0, 200.0, 400.0, 800.0]
"block.mass" = [0.5, 1.0, 2.0, 4.0]
"""


def timed(backend: PoolBackend | RayBackend, path: Path, out: Path, repeat: int) -> float:
    """The best wall time of ``repeat`` runs (the pool spawns its workers in every run; Ray's stay)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        summary = run_campaign(load_campaign(path), backend, out, io.StringIO())
        best = min(best, time.perf_counter() - t0)
        assert summary["ok"] and len(summary["jobs"][0]["tasks"]) == 16, summary
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=20.0, help="simulated seconds per task (default 20)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per configuration, the best counts (default 2)")
    ap.add_argument("--no-ray", action="store_true", help="only the process pool")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.toml"
        path.write_text(CAMPAIGN.format(mech=ROOT / "examples/mechanisms/mass_spring_damper.toml",
                                        duration=args.duration))
        rows = [(f"process pool, {n} worker(s)", timed(PoolBackend(n), path, Path(tmp) / "out", args.repeat))
                for n in (1, 2)]
        if not args.no_ray:
            env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            with LocalRayCluster(nodes=2, cpus=1, prefix="bench_", env=env) as address:
                for n in (1, 2):
                    backend = RayBackend(address, n)
                    try:
                        rows.append((f"Ray 2 nodes, {n} task(s) in flight", timed(backend, path, Path(tmp) / "out",
                                                                                    args.repeat)))
                    finally:
                        backend.close()
    base = {k.split(",")[0]: v for k, v in rows if k.endswith(("1 worker(s)", "1 task(s) in flight"))}
    print(f"16-task sweep, {args.duration:g} s simulated each; load average {os.getloadavg()[0]:.1f}")
    for name, wall in rows:
        print(f"  {name:<36} {wall:7.1f} s   speed-up {base[name.split(',')[0]] / wall:4.2f}x")


if __name__ == "__main__":
    main()
