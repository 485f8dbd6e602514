"""The numba cache guard: stale compiled code of the nb_* modules is dropped when any of their
sources (or numba) changes, and kept otherwise."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numba
import numpy as np
import pytest

from mbsd_twin import Simulator, load_mechanism
from mbsd_twin.compiled import nb_cache
from mbsd_twin.compiled.fastpath import (
    advance_signature,
    bind_signature,
    outputs_signature,
    restart_signature,
    start_signature,
)
from mbsd_twin.compiled.nb_cache import ASIDE_ENV
from mbsd_twin.model.loader import bundled_slider_crank


def _fake_dispatcher(folder: Path) -> SimpleNamespace:
    return SimpleNamespace(_cache=SimpleNamespace(_cache_path=str(folder)))


def test_stale_entries_are_removed_and_the_stamp_written(tmp_path: Path) -> None:
    for name in ("nb_solve.accelerate-40.py311.nbi", "nb_solve.accelerate-40.py311.1.nbc", "other.nbi"):
        (tmp_path / name).write_text("x")
    (tmp_path / nb_cache.STAMP).write_text("an older digest")
    nb_cache.guard(_fake_dispatcher(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mbsd_twin_nb.stamp", "other.nbi"]
    assert (tmp_path / nb_cache.STAMP).read_text() == nb_cache.digest()


def test_matching_stamp_keeps_the_cache(tmp_path: Path) -> None:
    (tmp_path / nb_cache.STAMP).write_text(nb_cache.digest())
    (tmp_path / "nb_kernels.profile-26.py311.nbi").write_text("x")
    nb_cache.guard(_fake_dispatcher(tmp_path))
    assert (tmp_path / "nb_kernels.profile-26.py311.nbi").exists()


def test_digest_covers_every_compiled_module() -> None:
    """Every compiled module, and the one whose constants they compile in (contact_search)."""
    here = Path(nb_cache.__file__).parent
    assert set(nb_cache.MODULES) == ({p.name for p in here.glob("nb_*.py")} - {"nb_cache.py"}) | {"contact_search.py"}


def test_compile_notice_while_slow_and_silent_when_fast(caplog: pytest.LogCaptureFixture) -> None:
    """A block that takes longer than ``after`` (a compile on an empty cache) is announced while it
    runs, and its duration logged at the end; a fast block (kernels loaded from the cache) logs nothing."""
    caplog.set_level(logging.WARNING, logger="mbsd_twin")
    with nb_cache.compile_notice("the kernels", after=0.05):
        time.sleep(0.3)
        during = [r.getMessage() for r in caplog.records]
    assert len(during) == 1 and "compiling the kernels into numba's disk cache" in during[0]
    took = float(caplog.records[-1].getMessage().split("after ")[1].split(" s")[0])
    assert len(caplog.records) == 2 and 0.3 <= took < 1.5
    caplog.clear()
    with nb_cache.compile_notice("other kernels", after=0.5):
        pass
    time.sleep(0.6)  # the cancelled timer never fires
    assert caplog.records == []


def test_entry_point_signatures_are_the_steppers() -> None:
    """A cold start compiles advance, outputs and restart (in the second process) for exactly the
    argument types the stepper calls them with (else they would be compiled again on first use)."""
    sim = Simulator(load_mechanism(bundled_slider_crank()))
    st = sim._stepper
    args = (st._S, 0.0, False, st._wb, st._ob, st._cb)
    assert advance_signature() == tuple(numba.typeof(a) for a in args)
    args = (st._S, st._u, st._ib, st._fb, st._wb, st._cb)
    assert restart_signature() == tuple(numba.typeof(a) for a in args)
    assert bind_signature() == tuple(numba.typeof(a) for a in (st._cb, st._u, st._ib, st._fb, st._wb))
    args = (st._S, 0.0, np.zeros(3), st._u, st._ib, st._fb, st._wb, st._ob, st._cb, False)  # keep
    assert start_signature() == tuple(numba.typeof(a) for a in args)
    args = (st._S, st._u, st._ib, st._fb, st._wb, st._cb, sim._react_idx, sim._effort_rows, 0.0)
    assert outputs_signature() == tuple(numba.typeof(a) for a in args)


@pytest.mark.slow  # it compiles the engine from an empty cache: 79 s of both cores in make test's CI run
def test_cold_start_compiles_advance_in_a_second_process(tmp_path: Path) -> None:
    """With an empty cache, the first Simulator loads the projection's entry, advance, bind and
    outputs from the cache the second process filled (cache hits, no compile of their own),
    compiles the right-hand side's entry, start and restart itself, says that it is compiling, and
    steps the slider crank to the same state, bit for bit, as this process does."""
    code = ("import numpy as np, mbsd_twin.compiled.nb_stepper as ns, mbsd_twin.compiled.nb_entries as ne\n"
            "from mbsd_twin import Simulator, load_mechanism\n"
            "from mbsd_twin.model.loader import bundled_slider_crank\n"
            "sim = Simulator(load_mechanism(bundled_slider_crank()))\n"
            "sim.set_input('motor_torque', 1.0); sim.advance_to(0.05)\n"
            "print(*(f'{sum(k.stats.cache_hits.values())},{len(k.stats.cache_misses)}'\n"
            "        for k in (ns.advance, ns.outputs, ns.bind, ns.restart, ns.start)))\n"
            "print(*(ne.compile_entry(k).cache_hits for k in (ne.PROJECT, ne.RHS)))\n"
            "print(repr(sim.outputs()['crank.theta']))\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    env.pop(ASIDE_ENV, None)
    cold = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert cold.stdout.split()[:5] == ["1,0", "1,0", "1,0", "0,1", "0,1"], cold.stdout  # (cache hits, misses)
    assert cold.stdout.split()[5:7] == ["1", "0"], cold.stdout  # the cfuncs: cache hits
    assert "compiling the engine's kernels" in cold.stderr
    sim = Simulator(load_mechanism(bundled_slider_crank()))
    sim.set_input("motor_torque", 1.0)
    sim.advance_to(0.05)
    assert cold.stdout.split()[7] == repr(sim.outputs()["crank.theta"])


LOCKED = """
import sys, time
from pathlib import Path
from mbsd_twin.fmi.standalone.engine_object import compile_lock
folder, log = Path(sys.argv[1]), Path(sys.argv[2])
with compile_lock(folder):
    start = time.monotonic()
    time.sleep(1.0)
    with log.open("a") as fh:
        fh.write(f"{start} {time.monotonic()}\\n")
"""


def test_one_process_at_a_time_compiles_the_standalone_engine(tmp_path: Path) -> None:
    """The engine's object and assembly (minutes on a cold cache) are compiled under one lock, so that
    parallel test workers or FMU builds wait for one compile instead of each compiling the same code:
    three processes holding :func:`compile_lock` on one folder hold it one after the other."""
    log = tmp_path / "held.txt"
    procs = [subprocess.Popen([sys.executable, "-c", LOCKED, str(tmp_path / "cache"), str(log)]) for _ in range(3)]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    spans = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(spans) == 3
    assert all(end <= nxt_start for (_, end), (nxt_start, _) in zip(spans, spans[1:], strict=False))
