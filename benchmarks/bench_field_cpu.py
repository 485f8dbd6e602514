"""CPU per sample of a default twin core (TwinCore: filter, change tests, output rows, JSON) on the
independent field rig's healthy streams (tests/field_rig.py: scipy, not the engine), in process, no
broker: the figure issue 28 holds at or below the code before it (≈ 200 µs per sample).

    .venv/bin/python benchmarks/bench_field_cpu.py [--speeds 2 10 38 100] [--seconds 5] [--repeat 3] [--hold 1]
        [--prediction-step S]

Prints, per crank speed [rad/s], the CPU time per sample [µs] of each repetition (process time over
the stream, a fresh core each time, after a throwaway core has loaded the kernels) and the
re-initialisations other than the start (``--prediction-step 0``: the filter's prediction by DOP853
under error control, as before the fixed-step default; the default: ``CoreConfig``'s). To compare
with another checkout of the package, run this file with that checkout first on PYTHONPATH
(``PYTHONPATH=/path/to/other python benchmarks/bench_field_cpu.py``), one process at a time: the
rig's streams are the same (seeded).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "tests"))
from field_rig import Rig, messages  # noqa: E402

import mbsd_twin as mt  # noqa: E402
from mbsd_twin.twin.config.sections import CoreConfig  # noqa: E402
from mbsd_twin.twin.core import TwinCore  # noqa: E402
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor  # noqa: E402


def cpu_per_sample(speed: float, seconds: float, repeat: int, hold: int = 1, cfg: CoreConfig | None = None
                   ) -> tuple[list[float], dict[str, int]]:
    """[µs of CPU per sample] per repetition, and the last run's re-initialisations by reason."""
    cfg = cfg or CoreConfig()
    msgs, _ = messages(Rig(speed=speed, seed=0), seconds)
    mech = mt.load_mechanism(ROOT / "examples" / "mechanisms" / "slider_crank.toml")
    batches = [parse_sensor(encode(m).encode(), m["asset"], 1 << 22) for m in msgs]
    assert all(isinstance(b, SensorBatch) for b in batches)
    n = sum(b.n for b in batches)  # type: ignore[union-attr]
    warm = TwinCore(cfg, mech)
    for b in batches[:5]:
        warm.step(b, hold)  # type: ignore[arg-type]
    out, resync = [], {}
    for _ in range(repeat):
        core = TwinCore(cfg, mech)
        t0 = time.process_time()
        for b in batches:
            core.step(b, hold)  # type: ignore[arg-type]
        out.append(1e6 * (time.process_time() - t0) / n)
        resync = {k: v for k, v in core.stats["resync"].items() if k != "start"}
    return out, resync


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speeds", type=float, nargs="+", default=[2.0, 10.0, 38.0, 100.0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hold", type=int, default=1, help="solver hold: the core corrects every hold-th sample")
    ap.add_argument("--prediction-step", type=float, default=None,
                    help="the filter's fixed prediction step [s] (0: DOP853; default: CoreConfig's)")
    a = ap.parse_args()
    cfg = CoreConfig() if a.prediction_step is None else CoreConfig(prediction_step=a.prediction_step)
    print(f"mbsd_twin from {Path(mt.__file__).parent}; prediction_step {cfg.prediction_step}")
    for speed in a.speeds:
        us, resync = cpu_per_sample(speed, a.seconds, a.repeat, a.hold, cfg)
        print(f"{speed:6.1f} rad/s: {' '.join(f'{x:.1f}' for x in us)} µs per sample (best {min(us):.1f}); "
              f"re-initialisations {resync or 'none'}")


if __name__ == "__main__":
    main()
