"""Keep numba's on-disk cache consistent across the compiled modules.

numba re-validates a cached function against its *own* source file only. The compiled path inlines
helpers across the ``nb_*`` modules (``inline="always"``), so a change in
one of them would leave stale machine code in the cache of the others — after an upgrade of the
package, for instance. :func:`guard` stamps the cache folder with a digest of all their sources and
numba's version and removes every cached ``nb_*`` entry when the stamp differs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numba

MODULES = ("nb_kernels.py", "nb_curves.py", "nb_joints.py", "nb_solve.py", "nb_dop853.py", "nb_flat.py",
           "nb_stepper.py", "nb_config.py")
STAMP = "mbsd_twin_nb.stamp"


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
