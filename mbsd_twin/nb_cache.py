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
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numba

MODULES = ("nb_kernels.py", "nb_curves.py", "nb_joints.py", "nb_solve.py", "nb_dop853.py", "nb_flat.py",
           "nb_stepper.py", "nb_config.py", "nb_contact.py", "contact_search.py")
STAMP = "mbsd_twin_nb.stamp"
NOTICE_AFTER = 2.0  # s: loading from the cache takes about a second; longer means compiling
LOG = logging.getLogger("mbsd_twin")
_READY: set[str] = set()  # what compile_notice has seen loaded in this process


@contextmanager
def compile_notice(what: str, after: float = NOTICE_AFTER) -> Iterator[None]:
    """Within the block the kernels of ``what`` are loaded or compiled: when that takes more than
    ``after`` seconds, log that they are being compiled (once, while it happens) and then how long
    it took. Once ``what`` has loaded, later blocks in the process start no timer (a twin builds a
    Simulator at every parameter change)."""
    if what in _READY:
        yield
        return
    t0 = time.perf_counter()
    timer = threading.Timer(after, LOG.warning, ("mbsd-twin: compiling %s into numba's disk cache (the first "
                                                 "run after an install or upgrade: about two minutes on a "
                                                 "2-core machine; later runs load it in about a second) ...", what))
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
