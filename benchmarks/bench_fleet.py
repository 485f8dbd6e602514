"""The local fleet on this machine (issue #19 item 2): N simulated slider-crank rigs at 1 kHz
(batches of 20: 50 messages/s each) through ``mbsd-twin fleet serve`` (one process per asset) and
its own mosquitto on a free loopback port. The rigs (one precomputed stream, :class:`FleetFeeder`)
and the observer run in this process: latency = the rig's send → the first ``twin/state`` message
of that batch arriving, one clock. Per asset count: p50/p99 over all assets (and the worst asset's
p99), the share of batches with a state output, and the hold levels the twins degraded to (from
their health: the largest ``hold`` seen and the ``degrade`` counter).

``--mode threads`` runs every twin as a thread group of ONE host process instead (the asyncio /
one-process alternative: the twins share one GIL) for comparison. ``--mode shared`` runs the fleet
with ``[fleet] twins_per_process = --per-process`` (issue #31 item 2; default: every twin in one
process) and adds the column "RSS MB/extra": the fleet tree's resident memory above that of the
first count's run, per twin added ((RSS(n) - RSS(n0)) / (n - n0); run with ``--counts 1,...``).

Cost per twin (issue #31 item 4), from ``/proc`` of the fleet's process tree (the fleet process and
every descendant): CPU seconds (utime + stime) over the measured window per twin per second of rig
time (1.0 = one core per twin), and resident memory (VmRSS) per twin at the end of the window.
``--load K`` runs K busy processes beside the fleet (another job on the machine) for the whole run.

    .venv/bin/python benchmarks/bench_fleet.py [--counts 1,5,10,20,40] [--duration 15] [--warmup 8] \
        [--mode threads|shared] [--per-process K] [--load 1]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from bench_twin import start_broker

from mbsd_twin.fleet.feed import FleetFeeder
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.client import connect
from mbsd_twin.rig.synthetic import RigConfig, stream

ROOT = Path(__file__).resolve().parents[1]


class Observer:
    def __init__(self, url: str) -> None:
        self.arrivals: dict[str, dict[int, float]] = {}
        self.holds: dict[str, set[int]] = {}
        self.degrades: dict[str, int] = {}
        self.lock = threading.Lock()
        self.c = connect(url, f"bench-fleet-observer-{os.getpid()}")
        self.c.on_message = self._on
        self.c.subscribe([("dt/v1/+/twin/state", 0), ("dt/v1/+/twin/health", 0)])

    def _on(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        now = time.monotonic()
        asset = msg.topic.split("/")[2]
        body = json.loads(msg.payload)
        with self.lock:
            if msg.topic.endswith("/state"):
                self.arrivals.setdefault(asset, {}).setdefault(body["src_seq"][0], now)
            else:
                self.holds.setdefault(asset, set()).add(body["hold"])
                self.degrades[asset] = body["counters"].get("degrade", 0)


def tree(pid: int) -> list[int]:
    """``pid`` and every descendant of it (from /proc/*/stat's parent ids)."""
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return out


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of ``pids`` [s] (those still alive)."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for p in pids:
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(f[11]) + int(f[12])
    return total / tick


def rss_mb(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            line = next(x for x in Path(f"/proc/{p}/status").read_text().splitlines() if x.startswith("VmRSS:"))
        except (OSError, StopIteration):
            continue
        total += int(line.split()[1])
    return total / 1024


def fleet_file(tmp: Path, url: str, assets: list[str], per_process: int = 1) -> Path:
    p = tmp / "fleet.toml"
    p.write_text(f'[fleet]\nbroker = "{url}"\ncheckpoint_interval = 5.0\ntwins_per_process = {per_process}\n'
                 + "".join(f'\n[[asset]]\nid = "{a}"\n' for a in assets))
    return p


def host_threads(path: str) -> None:
    """``--host FLEET``: every asset's twin in this one process (threads), until SIGTERM."""
    from mbsd_twin.fleet.config import load_fleet
    from mbsd_twin.fleet.member import Member

    cfg = load_fleet(path)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    members = [Member(a, cfg.settings) for a in cfg.assets]
    for m in members:
        m.start()
    stop.wait()
    for m in members:
        m.stop()


def run(n: int, mode: str, duration: float, warmup: float, mech: Any, msgs: list[dict[str, Any]],
        per_process: int = 1) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench_fleet_"))
    broker, url = start_broker(tmp)
    assets = [f"r{i:02d}" for i in range(n)]
    path = fleet_file(tmp, url, assets, per_process if mode == "shared" else 1)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_NUM_THREADS": "1"}
    cmd = ([sys.executable, "-m", "mbsd_twin.cli", "fleet", "serve", str(path)] if mode != "threads"
           else [sys.executable, __file__, "--host", str(path)])
    fleet = subprocess.Popen(cmd, env=env, stdout=open(tmp / "fleet.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    obs = Observer(url)
    feeder = FleetFeeder(mech, url, assets, rate=1000.0, batch=20, msgs=msgs)
    try:
        t_end = time.monotonic() + 180
        while len(obs.holds) < n and time.monotonic() < t_end:  # every twin up (its first health)
            time.sleep(0.2)
        feeder.start()
        time.sleep(warmup)
        with obs.lock:
            obs.holds.clear()
        i0 = max(max(d) for d in feeder.sent_at.values() if d)
        pids = tree(fleet.pid)
        c0, w0 = cpu_seconds(pids), time.monotonic()
        time.sleep(duration)
        c1, w1, rss = cpu_seconds(pids), time.monotonic(), rss_mb(tree(fleet.pid))
        i1 = max(max(d) for d in feeder.sent_at.values() if d) - 10  # the last batches may still be in flight
    finally:
        feeder.stop()
        fleet.send_signal(signal.SIGTERM)
        fleet.wait(60)
        obs.c.loop_stop()
        broker.kill()
    lat, worst, got, sent = [], 0.0, 0, 0
    for a in assets:
        sent_a = feeder.sent_at[a]
        arr = obs.arrivals.get(a, {})
        la = [1e3 * (arr[i] - sent_a[i]) for i in range(i0, i1) if i in arr]
        sent += i1 - i0
        got += len(la)
        lat += la
        worst = max(worst, float(np.percentile(la, 99)) if la else float("inf"))
    holds = sorted(set().union(*obs.holds.values())) if obs.holds else []
    return {"n": n, "p50": float(np.percentile(lat, 50)) if lat else float("nan"),
            "p99": float(np.percentile(lat, 99)) if lat else float("nan"), "worst_p99": worst,
            "delivered": got / max(1, sent), "holds": holds, "degrades": sum(obs.degrades.values()),
            "cpu_per_twin": (c1 - c0) / (n * (w1 - w0)), "rss_mb_per_twin": rss / n, "rss_mb": rss}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,5,10,20,40")
    ap.add_argument("--duration", type=float, default=15.0, help="measured seconds per count")
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds of streaming before measuring")
    ap.add_argument("--mode", choices=("processes", "threads", "shared"), default="processes")
    ap.add_argument("--per-process", type=int, default=0,
                    help="--mode shared: twins_per_process (0: all of the largest count in one process)")
    ap.add_argument("--load", type=int, default=0, help="busy processes beside the fleet (another job)")
    ap.add_argument("--host", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.host:
        host_threads(args.host)
        return
    mech = load_mechanism(bundled_slider_crank())
    # computed once, sent by every rig; long enough that the feeder's loop does not wrap within the
    # measurement (the wrap is a jump of the motion: every twin re-initialises, a 135 ms stall that
    # was the p99 of one twin on an idle machine)
    msgs = stream(mech, RigConfig(rate=1000.0, batch=20), args.warmup + args.duration + 10.0)
    cores = os.cpu_count() or 1
    shared = f" ({args.per_process or max(int(x) for x in args.counts.split(','))} per process)" \
        if args.mode == "shared" else ""
    print(f"fleet of slider-crank twins at 1 kHz (batches of 20), {args.mode}{shared}, {cores} cores, "
          f"{args.load} busy process(es) beside; {args.duration:g} s measured after {args.warmup:g} s; "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'assets':>6} {'p50 ms':>8} {'p99 ms':>8} {'worst p99':>10} {'delivered':>10} {'holds seen':>12} "
          f"{'degrades':>9} {'CPU/twin':>9} {'RSS MB/twin':>12} {'RSS MB/extra':>13}")
    counts = [int(x) for x in args.counts.split(",")]
    per_process = args.per_process or max(counts)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    first: dict[str, Any] = {}
    try:
        for n in counts:
            r = run(n, args.mode, args.duration, args.warmup, mech, msgs, per_process)
            first = first or r
            extra = (r["rss_mb"] - first["rss_mb"]) / (n - first["n"]) if n != first["n"] else float("nan")
            print(f"{r['n']:>6} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['worst_p99']:>10.1f} {r['delivered']:>10.1%} "
                  f"{','.join(map(str, r['holds'])):>12} {r['degrades']:>9} {r['cpu_per_twin']:>9.3f} "
                  f"{r['rss_mb_per_twin']:>12.0f} {extra:>13.1f}", flush=True)
    finally:
        for b in busy:
            b.kill()


if __name__ == "__main__":
    main()
