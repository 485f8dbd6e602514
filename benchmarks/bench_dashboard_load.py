"""What hammering the dashboard's read endpoints costs the twin (issue #30 item 6): a twin service
(the demo's slider crank with its filter, SQLite history, dashboard on its HTTP port) fed by the
demo rig at 1 kHz in batches of 20 (50 batches/s) through an embedded broker; the batches the twin
processes per second (the dashboard's tap counts them) while nobody reads, then while ``--threads``
clients request as fast as they can:

- ``data`` with one cursor from one address (the rate limit answers 429 at once; the rest are
  cached replies);
- ``data`` with a new cursor every request from one address each (each address is held to the rate
  limit): cursors older than the rows held (all one cache entry), and cursors among the held rows
  (a reply of up to 5000 rows each, no cache hit);
- ``history`` ranges of the twin's own history from one address each.

    .venv/bin/python benchmarks/bench_dashboard_load.py [--phase 8] [--threads 8]
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from mbsd_twin.demo.procs import EmbeddedBroker, free_port
from mbsd_twin.demo.rig import RigThread
from mbsd_twin.demo.run import DemoOptions, twin_config
from mbsd_twin.rig.synthetic import RigConfig
from mbsd_twin.twin.config.sections import HistoryConfig


def hammer(port: int, stop: threading.Event, client: str, path: Callable[[int], str], codes: Counter[int]) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(client, 0))
    k = 0
    while not stop.is_set():
        try:
            conn.request("GET", path(k))
            r = conn.getresponse()
            r.read()
            codes[r.status] += 1
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(client, 0))
            codes[0] += 1
        k += 1
    conn.close()


def held_cursor(svc: object, k: int) -> int:
    """A cursor among the rows the dashboard holds (its reply: the rows after it, up to 5000)."""
    store = svc.dashboard.store  # type: ignore[attr-defined]
    return int(store.total - 1 - k % max(1, min(len(store.rows), 4999)))


def phase(svc: object, seconds: float, port: int, threads: int,
          make: Callable[[int], tuple[str, Callable[[int], str]]] | None) -> tuple[float, Counter[int]]:
    """(twin batches per s, HTTP status counts) over ``seconds`` with ``threads`` hammering clients."""
    stop, codes = threading.Event(), Counter[int]()
    workers = []
    if make is not None:
        for i in range(threads):
            client, path = make(i)
            workers.append(threading.Thread(target=hammer, args=(port, stop, client, path, codes), daemon=True))
    store = svc.dashboard.store  # type: ignore[attr-defined]
    for w in workers:
        w.start()
    m0, t0 = store.messages, time.monotonic()
    time.sleep(seconds)
    rate = (store.messages - m0) / (time.monotonic() - t0)
    stop.set()
    for w in workers:
        w.join(30)
    return rate, codes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phase", type=float, default=8.0, help="s per phase")
    ap.add_argument("--threads", type=int, default=8)
    args = ap.parse_args()
    from mbsd_twin.twin.service import TwinService

    with tempfile.TemporaryDirectory(prefix="bench-dash-load-") as tmp, EmbeddedBroker() as broker:
        port = free_port()
        cfg = dataclasses.replace(twin_config(DemoOptions(), broker.url, port),
                                  history=HistoryConfig(path=str(Path(tmp) / "h.sqlite")))
        with TwinService(cfg) as svc:
            assert svc.connected.wait(15)
            rig = RigThread(svc.mech, RigConfig(), broker.url, 6 * args.phase + 10, 0.0)
            rig.start()
            time.sleep(5)  # the filter settles, the history fills
            t0 = float(svc.dashboard.store.t0 or 0.0)
            print(f"load average {os.getloadavg()[0]:.1f}; {args.threads} clients per phase, {args.phase:g} s each")
            cases = [
                ("nobody reads", None),
                ("data, one cursor, one address", lambda i: ("127.0.0.1", lambda k: "/dashboard/api/data?since=0")),
                ("data, a new cursor each request, one address per client",
                 lambda i: (f"127.0.1.{i + 1}", lambda k: f"/dashboard/api/data?since={k}")),
                ("data, a new cursor each request among the held rows (each reply up to 5000 rows), one address "
                 "per client", lambda i: (f"127.0.3.{i + 1}",
                                          lambda k: f"/dashboard/api/data?since={held_cursor(svc, 97 * k + i)}")),
                ("history of the twin's own channels, one address per client",
                 lambda i: (f"127.0.2.{i + 1}", lambda k: f"/dashboard/api/history?from={t0}&to={t0 + 60}"
                            f"&channel=state.theta,residuals.theta&points={2000 - k % 1000}")),
                ("nobody reads (again)", None),
            ]
            for label, make in cases:
                rate, codes = phase(svc, args.phase, port, args.threads, make)
                total = sum(codes.values())
                print(f"  {label}: twin {rate:.1f} batches/s; {total / args.phase:.0f} requests/s answered "
                      f"({', '.join(f'{c}: {n}' for c, n in sorted(codes.items())) or 'none'})")
            rig.stop()
            rig.join(10)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
