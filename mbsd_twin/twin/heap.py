"""The start-up's objects out of the garbage collector's way (:func:`freeze_startup`).

A long-lived twin process holds a large, permanent heap from its start-up: the compiled kernels'
dispatchers and type information, the model, the filter. CPython's collector scans every one of
them in each full collection while the twin runs, and once more when the interpreter shuts down.
On a machine busy with other work that last scan took 2–5 s after a SIGTERM — long enough for the
watchdog (``[service] stop_grace``, 5 s) to kill a twin that had already stopped cleanly.
``gc.freeze`` moves everything alive at that moment into the permanent generation, which no
collection scans; objects created later are collected as before.
"""

from __future__ import annotations

import gc


def freeze_startup() -> None:
    """Collect the start-up's garbage, then freeze what is left (call once per process, after the
    twin has started: objects frozen are never freed, so never call it per twin in a process that
    adds and removes twins)."""
    gc.collect()
    gc.freeze()
