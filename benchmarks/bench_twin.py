"""Twin throughput and latency: synthetic rig at 1 kHz (batches of 20) → broker → twin → broker.

For each fixed solver hold (samples per solver step) and for the adaptive default, prints whether
the stream was sustained (no overload drops, final lag), the arrival→state latency measured at a
subscriber (p50/p99, from the rig's send time to the state message's arrival) and the solver time
per batch. Starts its own mosquitto on a free loopback port.

    .venv/bin/python benchmarks/bench_twin.py [--duration 10] [--rate 1000] [--batch 20]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from mbsd_twin import load_mechanism
from mbsd_twin.twin.config import load_config
from mbsd_twin.twin.rig import RigConfig, Trajectory
from mbsd_twin.twin.rig_client import Rig
from mbsd_twin.twin.service import TwinService

MECH = "examples/mechanisms/slider_crank.toml"


def start_broker(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    proc = subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"mqtt://127.0.0.1:{port}"


def run(url: str, traj: Trajectory, levels: tuple[int, ...], args: argparse.Namespace) -> None:
    cfg = load_config(None, env={}, overrides={"broker": {"url": url}, "service": {
        "mechanism": MECH, "hold_levels": levels, "start_level": 0}, "core": {"resync_bounds": {"theta": 0.01}}})
    arrivals: dict[int, float] = {}
    sub = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)

    def on_msg(c: object, u: object, m: mqtt.MQTTMessage) -> None:
        arrivals.setdefault(json.loads(m.payload)["src_seq"][1], time.monotonic())
    sub.on_message = on_msg
    host, port = url.removeprefix("mqtt://").split(":")
    sub.connect(host, int(port))
    sub.subscribe(f"{cfg.core.base}/twin/state")
    sub.loop_start()
    with TwinService(cfg) as svc:
        while not svc.connected.is_set():
            time.sleep(0.01)
        rig = Rig(svc.mech, RigConfig(rate=args.rate, batch=args.batch), url, traj=traj)
        t_wall = time.monotonic()
        threading.Thread(target=rig.run, args=(args.duration,)).start()
        time.sleep(args.duration + 0.1)
        lag_end = svc.lag
        time.sleep(1.0)
        h = svc.health()
        wall = time.monotonic() - t_wall
    sub.loop_stop()
    lat = np.array([1e3 * (arrivals[s] - t) for s, t in rig.sent_at.items() if s in arrivals])
    c = h["counters"]
    name = "adaptive " + "/".join(map(str, levels)) if len(levels) > 1 else f"hold {levels[0]:>2}"
    sustained = c["dropped_overload"] == 0 and lag_end < 0.1
    print(f"{name:<16} sustained={'yes' if sustained else 'NO ':<3} lag_end={1e3 * lag_end:8.1f} ms  "
          f"processed={c['batches']}/{len(rig.sent_at)} dropped={c['dropped_overload']:4d}  "
          f"latency p50={np.percentile(lat, 50):7.1f} p99={np.percentile(lat, 99):7.1f} ms  "
          f"solver/batch p50={h['solver_ms_per_batch']['p50']:6.1f} ms  final hold={h['hold']}  "
          f"(wall {wall:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--batch", type=int, default=20)
    args = ap.parse_args()
    traj = Trajectory(load_mechanism(MECH), RigConfig(rate=args.rate, batch=args.batch))
    t = time.perf_counter()
    traj.samples(0, int((args.duration + 1) * args.rate))
    print(f"rig trajectory precomputed: {args.duration + 1:.0f} s in {time.perf_counter() - t:.1f} s wall")
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_broker(Path(tmp))
        try:
            for levels in ((1,), (5,), (20,), (1, 5, 20)):
                run(url, traj, levels, args)
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
