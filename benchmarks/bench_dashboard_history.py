"""The dashboard's history endpoint at scale (issue #30 item 6): a store of ``--samples`` stored
samples (default 20 M: two 1 kHz channels of 10 M each, one with σ (varying, as an estimate's does),
in blocks of 500 samples merged
from 25 messages of 20, as the twin writes them), served by the dashboard's history route
(:class:`mbsd_twin.dashboard.history.HistoryView` behind the twin's HTTP server) in a process of its
own; each request's wall time (HTTP, as a client sees it) and the server's peak RSS above its RSS
before the request (``VmHWM`` − ``VmRSS`` from ``/proc``, the peak reset through ``clear_refs``
before each request). A request is repeated with a different ``points`` (no cache hit); a repeat
with the same query shows the cached reply.

    .venv/bin/python benchmarks/bench_dashboard_history.py [--samples 20000000] [--backend sqlite|postgresql|both]
        [--block-messages 25]

``--block-messages 500`` stores blocks of 10 s (the longest the writer merges, e.g. a spool written
back): then every block of the whole span crosses a bucket edge (2000 buckets of 5 s) and every
sample is read — the worst case.

PostgreSQL: a database of its own on 127.0.0.1:5432 (user postgres, trust), created and dropped here.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import numpy as np

PG_ADMIN = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
ASSET, T0, DT, PER_MSG, MSGS_PER_BLOCK = "sc-01", 1_767_225_600.0, 1e-3, 20, 25
CHANNELS = (("state.theta", False), ("estimates.piston.mass", True))


def fill(store: Any, samples: int, msgs_per_block: int = MSGS_PER_BLOCK) -> float:
    """``samples`` split over the channels; the s it took."""
    from mbsd_twin.storage.history.rows import Block

    t_start = time.perf_counter()
    per_block = PER_MSG * msgs_per_block
    n_blocks = samples // len(CHANNELS) // per_block
    rng = np.random.default_rng(3)
    k_msg = np.arange(msgs_per_block)
    for c, (name, with_sigma) in enumerate(CHANNELS):
        for first in range(0, n_blocks, 20):
            blocks = []
            for k in range(first, min(first + 20, n_blocks)):
                t0 = T0 + k * per_block * DT
                v = np.sin(2 * np.pi * (t0 + np.arange(per_block) * DT) / 60.0 + c)
                v += 0.01 * rng.standard_normal(per_block)
                parts = np.column_stack([t0 + k_msg * PER_MSG * DT, np.full(msgs_per_block, PER_MSG)]).ravel()
                blocks.append(Block(ASSET, name, t0, DT, per_block, v.astype("<f8").tobytes(),
                                    (0.1 + 1e-3 * rng.standard_normal(per_block)).tobytes() if with_sigma else None,
                                    parts.astype("<f8").tobytes()))
            store.write(blocks, [])
    store.close()
    return time.perf_counter() - t_start


def serve(backend: str, where: str) -> None:
    """The server process: the dashboard's history route on the twin's HTTP server; prints its port."""
    from mbsd_twin.dashboard.history import HistoryView
    from mbsd_twin.twin.config.sections import HistoryConfig
    from mbsd_twin.twin.metrics import Metrics, serve_http

    cfg = HistoryConfig(backend=backend, path=where if backend == "sqlite" else "",
                        dsn=where if backend == "postgresql" else "", timeout=30.0)
    view = HistoryView(cfg, ASSET)
    server = serve_http("127.0.0.1", 0, Metrics(), lambda: {}, lambda: True, {"/dashboard/api/history": view.reply})
    print(server.server_address[1], flush=True)
    sys.stdin.read()  # until the benchmark closes the pipe


def _status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def request(port: int, pid: int, query: str) -> tuple[int, float, float, dict[str, Any]]:
    """(status, s, peak extra RSS in bytes, body) of one request."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _status(pid)["VmRSS"]
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard/api/history{query}", timeout=120) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    wall = time.perf_counter() - t0
    return status, wall, _status(pid)["VmHWM"] - before, json.loads(body)


def run(backend: str, where: str, samples: int) -> None:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", backend, where], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        status, wall, extra, d = request(port, proc.pid, "")
        span = d["span"]
        print(f"  overview: {status}, {wall * 1000:.0f} ms, span {span[1] - span[0]:.0f} s, "
              f"server RSS {_status(proc.pid)['VmRSS'] / 2**20:.0f} MB before the range requests")
        both = "state.theta,estimates.piston.mass"
        cases = [("one channel, everything (no from/to)", "channel=state.theta"),
                 ("two channels, whole span", f"from={span[0]}&to={span[1]}&channel={both}"),
                 ("two channels named 50 times each, from/to far beyond the span",
                  f"from=0&to=1e12&channel={','.join([both] * 50)}"),
                 ("two channels, one hour in the middle", f"from={span[0] + 3600}&to={span[0] + 7200}&channel={both}"),
                 ("one channel, 0.2 s (read whole: 200 samples)", f"from={span[0] + 100}&to={span[0] + 100.2}"
                                                                  "&channel=state.theta")]
        for case, (label, q) in enumerate(cases):
            runs = [request(port, proc.pid, f"?{q}&points={2000 - 3 * case - k}") for k in range(3)]
            n = sum(c["n"] for c in runs[0][3]["channels"].values())
            assert all(r[0] == 200 for r in runs), runs[0][3]
            times = ", ".join(f"{r[1]:.2f}" for r in runs)
            peak = max(r[2] for r in runs) / 2**20
            hit = request(port, proc.pid, f"?{q}&points={2000 - 3 * case}")
            print(f"  {label}: {n} samples read; {times} s (3 requests, new points each); "
                  f"peak extra RSS {peak:.1f} MB; cached repeat {hit[1] * 1000:.0f} ms")
        status, wall, _, d = request(port, proc.pid, f"?channel={both}&points=5000")
        print(f"  points=5000: {status} {d} in {wall * 1000:.0f} ms")
    finally:
        proc.stdin.close() if proc.stdin else None
        proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20_000_000)
    ap.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    ap.add_argument("--block-messages", type=int, default=MSGS_PER_BLOCK,
                    help=f"messages of {PER_MSG} samples merged into one stored block")
    ap.add_argument("--serve", nargs=2, metavar=("BACKEND", "WHERE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    from mbsd_twin.storage.history.pg import PostgresStore
    from mbsd_twin.storage.history.stores import SqliteStore

    print(f"{args.samples} stored samples ({len(CHANNELS)} channels at 1 kHz, blocks of "
          f"{PER_MSG * args.block_messages}); load average {os.getloadavg()[0]:.1f}")
    if args.backend in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="bench-dash-") as tmp:
            path = str(Path(tmp) / "h.sqlite")
            print(f"SQLite: filled in {fill(SqliteStore(path), args.samples, args.block_messages):.0f} s")
            run("sqlite", path, args.samples)
    if args.backend in ("postgresql", "both"):
        import psycopg

        name = f"bench_dash_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE {name}")
            try:
                dsn = f"host=127.0.0.1 port=5432 user=postgres dbname={name}"
                print(f"PostgreSQL: filled in {fill(PostgresStore(dsn), args.samples, args.block_messages):.0f} s")
                run("postgresql", dsn, args.samples)
            finally:
                admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
                admin.execute(f"DROP DATABASE IF EXISTS {name}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
