"""Twin throughput and latency: synthetic rig at 1 kHz (batches of 20) → broker → twin → broker.

By default the twin runs as a deployment does: ``mbsd-twin twin serve --config`` in its own
process; this process is the rig (publishing) and the observer (subscribed to twin/state and
twin/health). ``--inproc`` runs the twin as a thread of this process instead (it then shares the
interpreter lock with the rig and the observer). Each run starts with a warm-up of ``--warmup`` s
of streaming that is not counted (first-batch set-up: model, compiled-code load, estimator).

For each fixed solver hold (samples per solver step) and the adaptive levels, prints whether the
stream was sustained (every counted batch gave its state, final lag < 0.1 s; batches the twin
skipped to stay current are counted too, including those of the warm-up), the arrival→state latency at the
observer (p50/p99/max, from the rig's send to the state message's arrival; one clock, since both
ends are in this process) and the twin's own figures from its health message (solver ms per batch,
arrival→hand-over latency; these include the warm-up, whose first batches set up the model).
``--profile`` times the worker's stages offline instead (no broker for
the core; one paho client for the publish cost). Starts its own mosquitto on a free loopback port.

    .venv/bin/python benchmarks/bench_twin.py [--duration 10] [--rate 1000] [--batch 20] [--inproc] [--profile]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from mbsd_twin import load_mechanism
from mbsd_twin.rig.client import Rig
from mbsd_twin.rig.synthetic import RigConfig, Trajectory
from mbsd_twin.twin.link import set_nodelay

MECH = "examples/mechanisms/slider_crank.toml"
BASE = "dt/v1/sc-01"


def start_broker(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp / "mosquitto.conf"
    conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\n")
    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    proc = subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"mqtt://127.0.0.1:{port}"


class Observer:
    """Arrival time of the first state message per source seq; the twin's health and status messages."""

    def __init__(self, url: str) -> None:
        self.arrivals: dict[int, float] = {}
        self.sensors: dict[int, float] = {}  # the rig's own messages: the path without the twin
        self.health: dict[str, Any] = {}
        self.online = threading.Event()
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self.c.on_message = self._on
        host, port = url.removeprefix("mqtt://").split(":")
        self.c.connect(host, int(port))
        set_nodelay(self.c)
        self.c.subscribe([(f"{BASE}/twin/state", 0), (f"{BASE}/twin/health", 0), (f"{BASE}/twin/status", 1),
                          (f"{BASE}/meas/sensors", 0)])
        self.c.loop_start()

    def _on(self, c: Any, u: Any, m: mqtt.MQTTMessage) -> None:
        now = time.monotonic()
        body = json.loads(m.payload)
        if m.topic.endswith("/state"):
            self.arrivals.setdefault(body["src_seq"][1], now)
        elif m.topic.endswith("/sensors"):
            self.sensors.setdefault(body["seq"], now)
        elif m.topic.endswith("/health"):
            self.health = body
        elif body.get("state") == "online" and not m.retain:
            self.online.set()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def twin_toml(url: str, levels: tuple[int, ...], path: Path) -> Path:
    path.write_text(f'[broker]\nurl = "{url}"\n[core]\nresync_bounds = {{ theta = 0.01 }}\n'
                    f'[service]\nmechanism = "{os.path.abspath(MECH)}"\n'
                    f'hold_levels = {list(levels)}\nstart_level = 0\n'
                    "health_interval = 0.5\n")
    return path


class Twin:
    """The twin under test: a ``twin serve`` process, or a TwinService in this process."""

    def __init__(self, toml: Path, inproc: bool) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.svc: Any = None
        if inproc:
            from mbsd_twin.twin.config.file import load_config
            from mbsd_twin.twin.service import TwinService

            self.svc = TwinService(load_config(str(toml), env={}))
            self.svc.start()
        else:
            cmd = [sys.executable, "-m", "mbsd_twin.cli", "twin", "serve", "--config", str(toml)]
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         env={k: v for k, v in os.environ.items() if not k.startswith("MBSD_TWIN_")})

    def stop(self) -> None:
        if self.svc is not None:
            self.svc.stop()
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(10)


def run(url: str, traj: Trajectory, levels: tuple[int, ...], args: argparse.Namespace, tmp: Path) -> None:
    obs = Observer(url)
    twin = Twin(twin_toml(url, levels, tmp / "twin.toml"), args.inproc)
    try:
        if not obs.online.wait(30):
            raise RuntimeError("the twin did not come online")
        rig = Rig(load_mechanism(MECH), RigConfig(rate=args.rate, batch=args.batch), url, traj=traj)
        n_warm = int(args.warmup * args.rate / args.batch)
        t_wall = time.monotonic()
        rig.run(args.duration + args.warmup)
        time.sleep(0.1)
        lag_end = obs.health.get("lag_s", float("nan"))
        time.sleep(1.0)
        h = svc_health = obs.health
        if twin.svc is not None:
            h = svc_health = twin.svc.health()
        wall = time.monotonic() - t_wall
    finally:
        twin.stop()
        obs.close()
    counted = {s: t for s, t in rig.sent_at.items() if s >= n_warm}
    lat = np.array([1e3 * (obs.arrivals[s] - t) for s, t in counted.items() if s in obs.arrivals])
    direct = np.array([1e3 * (obs.sensors[s] - t) for s, t in counted.items() if s in obs.sensors])
    c = svc_health["counters"]
    name = "adaptive " + "/".join(map(str, levels)) if len(levels) > 1 else f"hold {levels[0]:>2}"
    sustained = lag_end < 0.1 and len(lat) == len(counted)  # every counted batch gave its state
    sol, hand = h["solver_ms_per_batch"], h["latency_ms"]
    print(f"{name:<16} sustained={'yes' if sustained else 'NO ':<3} lag_end={1e3 * lag_end:6.1f} ms  "
          f"states={len(lat)}/{len(counted)} dropped incl. warm-up={c['dropped_overload']:3d}  latency "
          f"p50={np.percentile(lat, 50):5.1f} p99={np.percentile(lat, 99):6.1f} max={lat.max():6.1f} ms  "
          f"(rig->observer direct p50={np.percentile(direct, 50):4.1f} p99={np.percentile(direct, 99):5.1f})  "
          f"twin: solver/batch p50={sol['p50']:4.1f} p99={sol['p99']:5.1f} ms, arrival->publish "
          f"p50={hand['p50']:4.1f} p99={hand['p99']:5.1f} ms, final hold={h['hold']} (wall {wall:.1f} s)", flush=True)


def timed(timers: dict[str, float], key: str, fn: Any) -> Any:
    """``fn`` adding its wall time to ``timers[key]``."""
    def wrapper(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **kw)
        finally:
            timers[key] += time.perf_counter() - t
    return wrapper


def profile(url: str, traj: Trajectory, args: argparse.Namespace) -> None:
    """Per-stage cost of the worker path, per batch: validation, core step (model stepping,
    estimate, the rest: comparison, alarms, JSON encoding), publishing (paho client.publish)."""
    from mbsd_twin.rig.synthetic import MessageSource
    from mbsd_twin.twin.config.sections import CoreConfig
    from mbsd_twin.twin.core import TwinCore
    from mbsd_twin.twin.protocol import encode, parse_sensor
    from mbsd_twin.twin.tracking import EkfTracker

    msgs = [encode(MessageSource(traj, 1000.0).message(i)).encode() for i in range(int(5 * args.rate / args.batch))]
    pub = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    host, port = url.removeprefix("mqtt://").split(":")
    pub.connect(host, int(port))
    pub.loop_start()
    for hold in (1, 5, 20):
        core = TwinCore(CoreConfig(), load_mechanism(MECH))
        timers = {k: 0.0 for k in ("parse", "step", "filter", "row", "encode", "publish")}
        tracker = core.tracker
        assert isinstance(tracker, EkfTracker)
        tracker.est.sample = timed(timers, "filter", tracker.est.sample)  # type: ignore[method-assign]
        tracker.row = timed(timers, "row", tracker.row)  # type: ignore[method-assign]
        core._messages = timed(timers, "encode", core._messages)  # type: ignore[method-assign]
        n = 0
        for k, m in enumerate(msgs):
            if k == 10:  # after a warm-up
                timers.update(dict.fromkeys(timers, 0.0))
                n = 0
            t0 = time.perf_counter()
            b = parse_sensor(m, "sc-01", 1 << 20)
            t1 = time.perf_counter()
            outs = core.step(b, hold)  # type: ignore[arg-type]
            t2 = time.perf_counter()
            for o in outs:
                pub.publish(o.topic, o.payload, qos=o.qos)
            t3 = time.perf_counter()
            timers["parse"] += t1 - t0
            timers["step"] += t2 - t1
            timers["publish"] += t3 - t2
            n += 1
        ms = {k: 1e3 * v / n for k, v in timers.items()}
        rest = ms["step"] - ms["filter"] - ms["row"] - ms["encode"]
        per = 1e3 * ms["filter"] / (args.batch // hold)
        print(f"hold {hold:>2}: per batch of {args.batch}: validation {ms['parse']:.2f} ms | core step "
              f"{ms['step']:.2f} ms = filter {ms['filter']:.2f} ({per:.0f} µs per correction) + output rows "
              f"{ms['row']:.2f} + messages/JSON {ms['encode']:.2f} + inputs/alarms/checkpoint {rest:.2f} | "
              f"publish {ms['publish']:.2f} ms", flush=True)
    pub.disconnect()
    pub.loop_stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=10.0, help="counted seconds of streaming per run")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds streamed before counting")
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--batch", type=int, default=20)
    ap.add_argument("--inproc", action="store_true", help="run the twin in this process (a thread)")
    ap.add_argument("--profile", action="store_true", help="time the worker's stages instead")
    ap.add_argument("--levels", default="1;5;20;1,5,20", help="hold levels per run, runs separated by ';'")
    args = ap.parse_args()
    traj = Trajectory(load_mechanism(MECH), RigConfig(rate=args.rate, batch=args.batch))
    t = time.perf_counter()
    total = args.duration + args.warmup + 1
    traj.samples(0, int(total * args.rate))
    print(f"rig trajectory precomputed: {total:.0f} s in {time.perf_counter() - t:.1f} s wall; twin "
          f"{'in this process' if args.inproc else 'in its own process (twin serve)'}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_broker(Path(tmp))
        try:
            if args.profile:
                profile(url, traj, args)
                return
            for spec in args.levels.split(";"):
                run(url, traj, tuple(int(x) for x in spec.split(",")), args, Path(tmp))
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
