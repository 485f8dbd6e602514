"""A recording of the synthetic rig as the twin service would write it (:mod:`mbsd_twin.twin.recorder`'s
format): calibration data with a known truth for tests and benchmarks (docs/calibration.md)."""

from __future__ import annotations

from ..model.loader import load_mechanism
from ..twin.config.sections import CoreConfig
from ..twin.protocol import encode
from ..twin.recorder import FORMAT, Recorder
from .synthetic import MessageSource, RigConfig, Trajectory


def write_rig_recording(path: str, mechanism: str, rig: RigConfig, duration: float,
                        core: CoreConfig | None = None) -> None:
    """A recording of the synthetic rig (its hidden-parameter model, noise), as the twin service
    would write it: a header, then one ``in`` record per sensor message (no faults)."""
    with open(mechanism, encoding="utf-8") as fh:
        text = fh.read()
    cfg = core or CoreConfig(asset=rig.asset, prefix=rig.prefix)
    src = MessageSource(Trajectory(load_mechanism(mechanism), rig), epoch=0.0)
    rec = Recorder(path, 1 << 40)
    try:
        rec({"k": "header", "format": FORMAT, "core": cfg.to_dict(), "mechanism": mechanism,
             "mechanism_toml": text})
        for i in range(int(round(duration * rig.rate / rig.batch))):
            rec({"k": "in", "hold": 1, "p": encode(src.message(i))})
    finally:
        rec.close()
