"""Keep numba's on-disk cache consistent across the compiled modules.

numba re-validates a cached function against its *own* source file only. The compiled path inlines
helpers across the ``nb_*`` modules (``inline="always"``), so a change in
one of them would leave stale machine code in the cache of the others — after an upgrade of the
package, for instance. :func:`guard` stamps the cache folder with a digest of all their sources and
numba's version and removes every cached ``nb_*`` entry when the stamp differs.

:func:`compile_notice` says so (logger ``mbsd_twin``, warning level: on stderr unless the
application configures logging) when loading the kernels takes long — they are being compiled, on
the first run after an install or upgrade — so that a CLI user or an FMU host sees why the first
Simulator is slow.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numba

MODULES = ("nb_kernels.py", "nb_curves.py", "nb_joints.py", "nb_solve.py", "nb_dop853.py", "nb_flat.py",
           "nb_stepper.py", "nb_config.py", "nb_contact.py", "nb_loads.py", "contact_search.py", "nb_entries.py",
           "nb_indirect.py", "nb_band.py")
STAMP = "mbsd_twin_nb.stamp"
ASIDE_ENV = "MBSD_TWIN_COMPILE_ASIDE"  # "0": never compile in a second process
NOTICE_AFTER = 2.0  # s: loading from the cache takes about a second; longer means compiling
LOG = logging.getLogger("mbsd_twin")
_READY: set[str] = set()  # what compile_notice has seen loaded in this process


@contextmanager
def compile_notice(what: str, after: float | None = None) -> Iterator[None]:
    """Within the block the kernels of ``what`` are loaded or compiled: when that takes more than
    ``after`` seconds (default :data:`NOTICE_AFTER`, read at the call), log that they are being
    compiled (once, while it happens) and then how long it took. Once ``what`` has loaded, later
    blocks in the process start no timer (a twin builds a Simulator at every parameter change)."""
    if what in _READY:
        yield
        return
    after = NOTICE_AFTER if after is None else after
    t0 = time.perf_counter()
    timer = threading.Timer(after, LOG.warning, ("mbsd-twin: compiling %s into numba's disk cache (the first "
                                                 "run after an install or upgrade: half a minute to a minute "
                                                 "on a 2-core machine; later runs load it in about a second) ...",
                                                 what))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        _READY.add(what)
        took = time.perf_counter() - t0
        if took > after:
            LOG.warning("mbsd-twin: %s ready after %.1f s", what, took)


def digest() -> str:
    h = hashlib.sha256(numba.__version__.encode())
    here = Path(__file__).resolve().parent
    for name in MODULES:
        h.update((here / name).read_bytes())
    return h.hexdigest()


def guard(dispatcher: Any) -> None:
    """Purge stale ``nb_*`` cache files in the cache folder of ``dispatcher`` (a cached njit
    function of these modules). Call at import, before any compiled function runs."""
    path = getattr(getattr(dispatcher, "_cache", None), "_cache_path", None)
    if not path:
        return
    folder = Path(path)
    stamp, want = folder / STAMP, digest()
    try:
        if stamp.read_text() == want:
            return
    except OSError:
        pass
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("nb_*.nb[ic]"):
            old.unlink(missing_ok=True)
        stamp.write_text(want)
    except OSError:  # a read-only cache folder: numba then compiles in memory, nothing stale is read
        pass


def cached(dispatcher: Any) -> bool:
    """Whether numba's disk cache holds an index for ``dispatcher`` (a cached njit function)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    index = getattr(cache_file, "_index_path", None)
    return isinstance(index, str) and os.path.exists(index)


def wait_cached(dispatcher: Any, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds until another process has put ``dispatcher`` into the disk
    cache (:func:`cached`); whether it is there."""
    end = time.monotonic() + timeout
    while not cached(dispatcher):
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)
    return True


def compile_aside(code: str) -> subprocess.Popen[bytes] | None:
    """Start a Python process that runs ``code`` (statements that compile kernels into numba's
    disk cache) beside this one, so that a cold start compiles on two CPUs: this process then
    loads what the other compiled from the cache. None — compile everything here — when only
    one CPU is available to this process, when ``MBSD_TWIN_COMPILE_ASIDE=0``, or when this
    interpreter is embedded in a program that is not a Python executable (an FMU host). The
    child sees this process's ``sys.path`` and prints nothing."""
    exe = sys.executable or ""
    if (os.environ.get(ASIDE_ENV, "1") == "0" or len(os.sched_getaffinity(0)) < 2
            or not os.path.basename(exe).startswith("python")):
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        return subprocess.Popen([exe, "-c", code], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    except OSError:
        return None


def join_aside(proc: subprocess.Popen[bytes] | None, timeout: float = 600.0) -> None:
    """Wait for a :func:`compile_aside` process (killed after ``timeout`` seconds: this process
    then compiles what it needs itself)."""
    if proc is None:
        return
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
