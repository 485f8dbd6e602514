"""SIGTERM that works even while the twin's worker is stuck holding the GIL.

A Python signal handler runs only when the interpreter gets the GIL back; a worker stuck inside
compiled code (numba holds the GIL) would make the service ignore SIGTERM. Python's C-level signal
handler, however, writes the signal number to the "wakeup fd" without the GIL. :func:`arm` points
that fd at a pipe read by a tiny watcher process: after SIGTERM (or SIGINT) it gives the service
``grace`` seconds to stop gracefully (offline status, flush, disconnect) and otherwise kills it with
SIGKILL, so the broker publishes the service's will (``twin/status`` offline). The watcher exits by
itself when the service does (the pipe reaches end of file).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

_WATCHER = r"""
import os, select, signal, sys, time
fd, parent, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
deadline = None
while True:
    wait = None if deadline is None else max(0.0, deadline - time.monotonic())
    ready, _, _ = select.select([fd], [], [], wait)
    if not ready:
        if os.getppid() == parent:
            sys.stderr.write("mbsd-twin watchdog: no graceful stop within %g s of SIGTERM; killing %d\n"
                             % (grace, parent))
            os.kill(parent, signal.SIGKILL)
        break
    data = os.read(fd, 256)
    if not data:
        break
    if deadline is None and (signal.SIGTERM in data or signal.SIGINT in data):
        deadline = time.monotonic() + grace
"""


def arm(grace: float) -> subprocess.Popen[bytes] | None:
    """Start the watcher (main thread only, before any other wakeup fd is set); None when
    ``grace`` <= 0 (no watchdog). The process must handle SIGTERM with a Python handler (e.g.
    ``signal.signal``), not ``loop.add_signal_handler``, which takes the wakeup fd for itself."""
    if grace <= 0:
        return None
    r, w = os.pipe()
    os.set_blocking(w, False)
    proc = subprocess.Popen([sys.executable, "-c", _WATCHER, str(r), str(os.getpid()), repr(float(grace))],
                            pass_fds=(r,), stdin=subprocess.DEVNULL)
    os.close(r)
    signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    return proc
