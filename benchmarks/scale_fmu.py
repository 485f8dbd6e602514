"""FMU builds of a large mechanism for benchmarks/bench_scale.py --fmu (issue #33): the n-link
chain of tests/large_mechanisms.py written as a mechanism file, then ``mbsd-twin fmu build``
(PythonFMU's FMI 2.0 FMU) and ``mbsd-twin fmu build --standalone`` timed (their Python calls), and
each FMU instantiated and initialised through fmpy (plus one 1 ms step). Built into a temporary
folder. fmpy loads the FMUs into this process, which therefore ends with ``os._exit`` (PythonFMU
0.7.0 can abort a process at interpreter exit, see fmu/README.md)."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from large_mechanisms import chain_toml


def _start(fmu: Path) -> tuple[float, float]:
    """(instantiate + initialise [s], first 1 ms step [s]) of ``fmu`` through fmpy's FMU2Slave."""
    from fmpy import extract, read_model_description
    from fmpy.fmi2 import FMU2Slave

    md = read_model_description(str(fmu))
    unzipped = extract(str(fmu))
    t0 = time.perf_counter()
    s: Any = FMU2Slave(guid=md.guid, unzipDirectory=unzipped, modelIdentifier=md.coSimulation.modelIdentifier,
                       instanceName="bench")
    s.instantiate()
    s.setupExperiment(startTime=0.0)
    s.enterInitializationMode()
    s.exitInitializationMode()
    t1 = time.perf_counter()
    s.doStep(0.0, 1e-3)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def report(n: int) -> None:
    """Print the build and start figures of both flavours for the n-link chain, then end the process."""
    from mbsd_twin.fmi.build import build_fmu
    from mbsd_twin.fmi.standalone import build_standalone

    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as tmp:
        mech = Path(tmp) / f"chain{n}.toml"
        mech.write_text(chain_toml(n))
        for flavour, build in (("pythonfmu", build_fmu), ("standalone", build_standalone)):
            start = time.perf_counter()
            fmu = build(mech, Path(tmp) / f"{flavour}.fmu")
            built = time.perf_counter() - start
            init, step = _start(fmu)
            print(f"FMU {flavour:10s} chain{n}: build {built:7.2f} s, {fmu.stat().st_size / 1e6:6.2f} MB; "
                  f"instantiate+initialise {init:7.3f} s; first 1 ms step {step:7.4f} s", flush=True)
    sys.stdout.flush()
    os._exit(0)
