"""The local fleet on this machine (issue #19 item 2): N simulated slider-crank rigs at 1 kHz
(batches of 20: 50 messages/s each) through ``mbsd-twin fleet serve`` (one process per asset) and
its own mosquitto on a free loopback port. The rigs (one precomputed stream, :class:`FleetFeeder`)
and the observer run in this process: latency = the rig's send → the first ``twin/state`` message
of that batch arriving, one clock. Per asset count: p50/p99 over all assets (and the worst asset's
p99), the share of batches with a state output, and the hold levels the twins degraded to (from
their health: the largest ``hold`` seen and the ``degrade`` counter).

``--mode threads`` runs every twin as a thread group of ONE host process instead (the asyncio /
one-process alternative: the twins share one GIL) for comparison.

    .venv/bin/python benchmarks/bench_fleet.py [--counts 2,5,10,20] [--duration 15] [--warmup 8] [--mode threads]
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


def fleet_file(tmp: Path, url: str, assets: list[str]) -> Path:
    p = tmp / "fleet.toml"
    p.write_text(f'[fleet]\nbroker = "{url}"\ncheckpoint_interval = 5.0\n'
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


def run(n: int, mode: str, duration: float, warmup: float, mech: Any, msgs: list[dict[str, Any]]
        ) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench_fleet_"))
    broker, url = start_broker(tmp)
    assets = [f"r{i:02d}" for i in range(n)]
    path = fleet_file(tmp, url, assets)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_NUM_THREADS": "1"}
    cmd = ([sys.executable, "-m", "mbsd_twin.cli", "fleet", "serve", str(path)] if mode == "processes"
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
        time.sleep(duration)
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
            "delivered": got / max(1, sent), "holds": holds, "degrades": sum(obs.degrades.values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="2,5,10,20")
    ap.add_argument("--duration", type=float, default=15.0, help="measured seconds per count")
    ap.add_argument("--warmup", type=float, default=8.0, help="seconds of streaming before measuring")
    ap.add_argument("--mode", choices=("processes", "threads"), default="processes")
    ap.add_argument("--host", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.host:
        host_threads(args.host)
        return
    mech = load_mechanism(bundled_slider_crank())
    msgs = stream(mech, RigConfig(rate=1000.0, batch=20), 10.0)  # computed once, looped by every rig
    cores = os.cpu_count() or 1
    print(f"fleet of slider-crank twins at 1 kHz (batches of 20), {args.mode}, {cores} cores; "
          f"{args.duration:g} s measured after {args.warmup:g} s")
    print(f"{'assets':>6} {'p50 ms':>8} {'p99 ms':>8} {'worst p99':>10} {'delivered':>10} {'holds seen':>12} "
          f"{'degrades':>9}")
    for n in [int(x) for x in args.counts.split(",")]:
        r = run(n, args.mode, args.duration, args.warmup, mech, msgs)
        print(f"{r['n']:>6} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['worst_p99']:>10.1f} {r['delivered']:>10.1%} "
              f"{','.join(map(str, r['holds'])):>12} {r['degrades']:>9}", flush=True)


if __name__ == "__main__":
    main()
