"""Overload: the twin under (a) a 10x valid flood and (b) a flood of invalid messages beside a 1 kHz
legitimate stream (issue #15, item 4). Starts its own mosquitto on a free loopback port; the twin
runs as ``twin serve`` in its own process (``--inproc``: a thread of this process) with the default
service settings; the legitimate rig and the observer run in this process (one clock for the
latency: the rig's send → the state message's arrival), the invalid flood in a child process.

(a) ``--flood-rate`` (10 kHz, 10x the nominal 1 kHz) in batches of ``--batch`` (20): 10x the
    samples and 10x the messages. Printed: batches sent and processed (with a state output),
    goodput (processed batches/s and the rig time those batches cover per wall second), the
    twin's freshness (rate at which the rig time of its newest output advances; ≥ 1 = keeps up), and
    the latency of the processed batches. Target: ≥ 1x real time, p99 < 100 ms.
(b) ``--invalid`` (20,000) invalid messages at ``--invalid-rate`` (3,000/s), a mix of every
    rejection reason (oversize, utf8, json, non_finite, schema, version, asset, length) shaped like
    real 2 kB messages, beside the 1 kHz stream in batches of 20. Printed: the share of legitimate
    batches sent during the flood that produced a state, and their latency p50/p99. Target: ≥ 99 %,
    p99 < 50 ms.

    .venv/bin/python benchmarks/bench_overload.py [--duration 8] [--only a|b] [--inproc] [--service 'max_lag = 0.1']
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from bench_twin import BASE, MECH, Twin, start_broker
from paho.mqtt.enums import CallbackAPIVersion

from mbsd_twin import load_mechanism
from mbsd_twin.rig.client import Rig
from mbsd_twin.rig.synthetic import MessageSource, RigConfig, Trajectory
from mbsd_twin.twin.link import set_nodelay
from mbsd_twin.twin.protocol import encode


class Observer:
    """Per source seq: arrival time and rig time of the last sample of the first state message."""

    def __init__(self, url: str) -> None:
        self.first: dict[int, tuple[float, float]] = {}
        self.health: dict[str, Any] = {}
        self.online = threading.Event()
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self.c.on_message = self._on
        host, port = url.removeprefix("mqtt://").split(":")
        self.c.connect(host, int(port))
        set_nodelay(self.c)
        self.c.subscribe([(f"{BASE}/twin/state", 0), (f"{BASE}/twin/health", 0), (f"{BASE}/twin/status", 1)])
        self.c.loop_start()

    def _on(self, c: Any, u: Any, m: mqtt.MQTTMessage) -> None:
        now = time.monotonic()
        body = json.loads(m.payload)
        if m.topic.endswith("/state"):
            t_last = body["t0"] + (body["n"] - 1) * body["dt"]
            self.first.setdefault(body["src_seq"][1], (now, t_last))
        elif m.topic.endswith("/health"):
            self.health = body
        elif body.get("state") == "online" and not m.retain:
            self.online.set()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def invalid_payloads(traj: Trajectory, n_kinds: int = 64) -> list[bytes]:
    """Invalid messages of every rejection reason, each shaped like a real one (about 2 kB)."""
    src = MessageSource(traj, time.time(), 10**6)
    out: list[bytes] = []
    for i in range(n_kinds):
        m = src.message(i)
        kind = i % 8
        if kind == 0:
            m["asset"] = "sc-99"
        elif kind == 1:
            m["v"] = 2
        elif kind == 2:
            m["ch"]["f_y"] = m["ch"]["f_y"][:-1]
        elif kind == 3:
            m["seq"] = -1
        elif kind == 7 and i != 7:
            m["dt"] = 0
        text = encode(m)
        if kind == 4:
            text = text[: len(text) // 2]  # truncated JSON
        elif kind == 5:
            text = text.replace(str(m["ch"]["f_y"][-1]), "NaN", 1)
        elif kind == 6:
            out.append(b"\xff\xfe" + text.encode()[2:])
            continue
        elif kind == 7 and i == 7:
            text = " " * 300_000 + text  # oversize (one in 64)
        out.append(text.encode())
    return out


def flooder(url: str, n: int, rate: float, payload_file: str) -> None:
    """Child process: publish ``n`` invalid messages at ``rate``/s (QoS 0), paced every 10 ms."""
    payloads = json.loads(Path(payload_file).read_text())
    blobs = [bytes.fromhex(p) for p in payloads]
    c = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    host, port = url.removeprefix("mqtt://").split(":")
    c.connect(host, int(port))
    c.loop_start()
    t0 = time.monotonic()
    for k in range(n):
        if k % 30 == 0:
            wait = t0 + k / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        c.publish(f"{BASE}/meas/sensors", blobs[k % len(blobs)], qos=0)
    time.sleep(0.5)
    c.disconnect()
    c.loop_stop()
    print(json.dumps({"sent": n, "seconds": time.monotonic() - t0}), flush=True)


def twin_toml(url: str, path: Path, service: str = "") -> Path:
    extra = "".join(f"{kv.strip()}\n" for kv in service.split(";") if kv.strip())
    path.write_text(f'[broker]\nurl = "{url}"\n[service]\nmechanism = "{os.path.abspath(MECH)}"\n'
                    f'health_interval = 0.5\n{extra}')
    return path


def pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def report(name: str, rig: Rig, obs: Observer, counted: set[int], dt_batch: float, wall: float) -> dict[str, Any]:
    got = [s for s in sorted(counted) if s in obs.first]
    lat = np.array([1e3 * (obs.first[s][0] - rig.sent_at[s]) for s in got])
    arr = np.array([obs.first[s] for s in got])
    fresh = float("nan")
    if len(arr) > 2:
        fresh = (arr[-1, 1] - arr[0, 1]) / (arr[-1, 0] - arr[0, 0])  # rig-time advance of the newest output
    h = obs.health.get("counters", {})
    res = {"scenario": name, "sent": len(counted), "processed": len(got), "share": len(got) / max(1, len(counted)),
           "goodput_batches_per_s": len(got) / wall, "goodput_rig_s_per_s": len(got) * dt_batch / wall,
           "freshness_rate": fresh, "p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": pct(lat, 100),
           "dropped_overload": h.get("dropped_overload"), "coalesced": h.get("coalesced"),
           "invalid": sum(h.get("invalid", {}).values()), "hold": obs.health.get("hold")}
    print(f"{name}: processed {len(got)}/{len(counted)} batches ({100 * res['share']:.1f} %), goodput "
          f"{res['goodput_batches_per_s']:.0f} batches/s = {res['goodput_rig_s_per_s']:.2f} rig s/s, freshness "
          f"{fresh:.2f}x real time, latency p50 {res['p50_ms']:.1f} p99 {res['p99_ms']:.1f} max "
          f"{res['max_ms']:.1f} ms; twin: dropped_overload {res['dropped_overload']}, coalesced "
          f"{res['coalesced']}, invalid {res['invalid']}, hold {res['hold']}", flush=True)
    sol = obs.health.get("solver_ms_per_batch", {})
    lat_twin = obs.health.get("latency_ms", {})
    print(f"    twin health: arrival->publish p50 {lat_twin.get('p50', 0):.1f} p99 {lat_twin.get('p99', 0):.1f} ms, "
          f"solver ms/batch p50 {sol.get('p50', 0):.1f} p99 {sol.get('p99', 0):.1f}, degrade "
          f"{h.get('degrade')}, gap_predicted {h.get('gap_predicted')}, resync {h.get('resync')}, batches "
          f"{h.get('batches')}, received {h.get('received')}", flush=True)
    return res


def scenario_a(url: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    obs = Observer(url)
    twin = Twin(twin_toml(url, tmp / "twin.toml", args.service), args.inproc)
    try:
        if not obs.online.wait(60):
            raise RuntimeError("the twin did not come online")
        warm = Rig(load_mechanism(MECH), RigConfig(), url)
        warm.precompute(args.warmup)
        warm.run(args.warmup)  # first batches: model set-up
        time.sleep(0.5)
        cfg = RigConfig(rate=args.flood_rate, batch=args.batch, seed=2)
        rig = Rig(load_mechanism(MECH), cfg, url)
        rig.precompute(args.duration)
        t0 = time.monotonic()
        rig.run(args.duration)
        wall = time.monotonic() - t0
        time.sleep(1.0)
    finally:
        twin.stop()
        obs.close()
    return report(f"(a) valid flood {args.flood_rate / 1000:g} kHz", rig, obs, set(rig.sent_at),
                  args.batch / args.flood_rate, wall)


def scenario_b(url: str, args: argparse.Namespace, tmp: Path, traj: Trajectory) -> dict[str, Any]:
    payload_file = tmp / "invalid.json"
    payload_file.write_text(json.dumps([p.hex() for p in invalid_payloads(traj)]))
    obs = Observer(url)
    twin = Twin(twin_toml(url, tmp / "twin.toml", args.service), args.inproc)
    try:
        if not obs.online.wait(60):
            raise RuntimeError("the twin did not come online")
        rig = Rig(load_mechanism(MECH), RigConfig(), url, traj=traj)
        n_flood_s = args.invalid / args.invalid_rate
        th = threading.Thread(target=rig.run, args=(args.warmup + n_flood_s + 1.0,))
        th.start()
        time.sleep(args.warmup)
        t0 = time.monotonic()
        flood = subprocess.run([sys.executable, __file__, "--flooder", url, str(args.invalid),
                                str(args.invalid_rate), str(payload_file)], capture_output=True, text=True, check=True)
        t1 = time.monotonic()
        th.join()
        time.sleep(1.0)
    finally:
        twin.stop()
        obs.close()
    print(f"flooder: {flood.stdout.strip()}")
    during = {s for s, t in rig.sent_at.items() if t0 <= t <= t1}
    return report(f"(b) {args.invalid} invalid at {args.invalid_rate:g}/s + 1 kHz", rig, obs, during, 0.02, t1 - t0)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--flooder":
        flooder(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=8.0, help="s of the valid flood (a)")
    ap.add_argument("--warmup", type=float, default=2.0, help="s of the 1 kHz stream before counting")
    ap.add_argument("--flood-rate", type=float, default=10000.0, help="samples/s of the valid flood (a)")
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--invalid", type=int, default=20000)
    ap.add_argument("--invalid-rate", type=float, default=3000.0)
    ap.add_argument("--only", choices=("a", "b"))
    ap.add_argument("--inproc", action="store_true", help="run the twin in this process (a thread)")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--service", default="", help="[service] settings of the twin, e.g. 'max_lag = 0.1; lag_low = 0'")
    args = ap.parse_args()
    traj = Trajectory(load_mechanism(MECH), RigConfig())
    traj.samples(0, int((args.warmup + args.invalid / args.invalid_rate + 2) * 1000))
    print(f"{os.cpu_count()} CPUs; twin {'in this process' if args.inproc else 'in its own process'}", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        proc, url = start_broker(tmp)
        try:
            if args.only in (None, "a"):
                results.append(scenario_a(url, args, tmp))
            if args.only in (None, "b"):
                results.append(scenario_b(url, args, tmp, traj))
        finally:
            proc.kill()
            proc.wait()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
