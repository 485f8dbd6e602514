"""The twin's estimator on synthetic rig streams whose truth is known (mbsd_twin.twin.scenarios):
cost per sample, innovation RMS, angle error against the truth, mean NIS and its χ² 95 % band,
re-initialisations, change alarms (statistic, delay after the fault onset, estimated onset, size)
and the torque estimate's error, one JSON line per scenario.

    python benchmarks/bench_estimation.py [--duration 20] [--scenario healthy --scenario mass ...]
"""

from __future__ import annotations

import argparse
import json

from mbsd_twin.twin.scenarios import SCENARIOS, run, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS)
    args = ap.parse_args()
    for s in args.scenario or SCENARIOS:
        print(json.dumps(summary(run(s, args.duration)), default=str), flush=True)


if __name__ == "__main__":
    main()
