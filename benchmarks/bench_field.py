"""Issue 28's field targets through the real service: the independent slider-crank rig of
tests/field_rig.py (scipy, not the engine) → a real mosquitto → ``mbsd-twin twin serve`` with the
default configuration (only the broker address set; no HTTP port) → this process.

Per run it starts mosquitto (``set_tcp_nodelay true``, loopback, a free port, its configuration in
a temporary directory) and a ``twin serve`` process, generates the rig's messages and truth
(outside the timed part), publishes them in real time (1 kHz in batches of 20: a message every
20 ms), subscribes to twin/state, twin/residuals, twin/alarms, twin/diagnosis and twin/health, and
prints:

* alarms raised (name, rig time), re-initialisations by reason (``health.counters.resync``
  without ``start``, and their times from the residual messages' ``resync_events``), hold levels
  seen (health messages and ``hold_change``);
* the crank-angle error RMS / max of twin/state's theta against the truth after the first 1 s,
  (a) at the published sample times and (b) at each sample's true time (the batch ``src_seq``
  says which samples a state message carries; differs from (a) only when the published time
  base is offset, e.g. anchored on a jittered ``t0``);
* the twin process's CPU time per rig sample (``/proc/<pid>/stat`` utime + stime over the
  streaming and the drain after it, divided by the samples published) and rig send → twin/state
  latency;
* for fault runs the first alarm's delay after the onset, the quantities it names, alarms before
  the onset and twin/diagnosis' top candidate.

Conditions: ``healthy``; ``lossy`` (batches lost by a two-state Markov chain: ~20 % in bursts of
1–10 batches, i.e. up to 200 ms, plus a send delay of U(0, 5 ms) before each publish, so
messages are never reordered); ``t0jitter`` (each batch's ``t0`` off by N(0, 5 ms), samples and
send times regular). Faults: the step faults of tests/test_twin_field.py FAULTS at 3 s (20 s runs)
and ``friction_ramp`` (a bearing friction torque 0 → 0.3 N·m over 10 s from 5 s; 40 s run).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_field.py --speed 38 --duration 20
    PYTHONPATH=. .venv/bin/python benchmarks/bench_field.py --speed 2,10 --condition healthy,lossy,t0jitter
    PYTHONPATH=. .venv/bin/python benchmarks/bench_field.py --fault all
    PYTHONPATH=. .venv/bin/python benchmarks/bench_field.py --all      # the whole table, sequentially

Each run is bounded: the stream's length, a 60 s wait for the twin to come online, a drain of at
most 10 s, then SIGTERM (SIGKILL after 15 s) to the twin and the broker. Every process it starts is
stopped on exit (also on Ctrl-C). Traffic: 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from mbsd_twin.twin.link import set_nodelay

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from conftest import Broker  # noqa: E402
from field_rig import Fault, Rig, Truth, messages  # noqa: E402
from test_twin_field import FAULTS, ONSET  # noqa: E402

BASE = "dt/v1/sc-01"
PERIOD = 0.02  # s between messages: 1 kHz in batches of 20
SETTLE = 1.0  # s of rig time left out of the error figures
MARK = 250  # message (5 s): the CPU figure is also given from here on, without the twin's first-batch set-up
SPEEDS = (2.0, 10.0, 38.0, 100.0)
CONDITIONS = ("healthy", "lossy", "t0jitter")
RAMP_ONSET = 5.0
ALL_FAULTS = {**{k: v[0] for k, v in FAULTS.items()}, "friction_ramp": Fault("torque", 0.3, RAMP_ONSET, ramp=10.0)}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process [s] (``/proc/<pid>/stat`` fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


class Procs:
    """mosquitto and ``twin serve`` for one run; ``stop`` ends both (SIGTERM, then SIGKILL)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.mq = Broker(tmp, kind="mosquitto")  # the tests' broker: loopback, a free port, set_tcp_nodelay
        self.url = self.mq.url
        self.twin: subprocess.Popen[bytes] | None = None

    def start_broker(self) -> None:
        self.mq.start()

    def start_twin(self) -> None:
        toml = self.tmp / "twin.toml"
        toml.write_text(f'[broker]\nurl = "{self.url}"\n')  # everything else: the defaults (no HTTP port)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MBSD_TWIN_")}
        log = open(self.tmp / "twin.log", "wb")  # noqa: SIM115 - owned by the process
        self.twin = subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "twin", "serve", "--config", str(toml)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.tmp)

    def twin_log(self, lines: int = 20) -> str:
        path = self.tmp / "twin.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        p = self.twin
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self.mq.stop()


@dataclass
class Observed:
    states: list[tuple[int, float, float, int, list[float], float]] = field(default_factory=list)
    alarms: list[dict[str, Any]] = field(default_factory=list)
    diagnoses: list[dict[str, Any]] = field(default_factory=list)
    health: list[dict[str, Any]] = field(default_factory=list)
    resync_events: list[dict[str, Any]] = field(default_factory=list)
    hold_changes: list[dict[str, Any]] = field(default_factory=list)
    last_state: float = 0.0
    online: threading.Event = field(default_factory=threading.Event)


class Observer:
    """Subscribed to the twin's outputs; stores what the figures need (arrival times: monotonic)."""

    def __init__(self, url: str) -> None:
        self.o = Observed()
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
        self.c.on_message = self._on
        port = int(url.rsplit(":", 1)[1])
        self.c.connect("127.0.0.1", port)
        set_nodelay(self.c)
        self.c.subscribe([(f"{BASE}/twin/state", 0), (f"{BASE}/twin/residuals", 0), (f"{BASE}/twin/alarms", 1),
                          (f"{BASE}/twin/diagnosis", 1), (f"{BASE}/twin/health", 0), (f"{BASE}/twin/status", 1)])
        self.c.loop_start()

    def _on(self, c: Any, u: Any, m: mqtt.MQTTMessage) -> None:
        now = time.monotonic()
        leaf, o = m.topic.rsplit("/", 1)[1], self.o
        if leaf == "residuals":
            if b"resync_events" in m.payload or b"hold_change" in m.payload:
                b = json.loads(m.payload)
                o.resync_events += b.get("resync_events", [])
                if "hold_change" in b:
                    o.hold_changes.append(b["hold_change"])
            return
        b = json.loads(m.payload)
        if leaf == "state":
            o.states.append((b["src_seq"][1], b["t0"], b["dt"], b["n"], b["ch"]["theta"], now))
            o.last_state = now
        elif leaf == "alarms":
            o.alarms.append(b)
        elif leaf == "diagnosis":
            o.diagnoses.append(b)
        elif leaf == "health":
            b["_arrival"] = now
            o.health.append(b)
        elif leaf == "status" and b.get("state") == "online":
            o.online.set()

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def loss_mask(n: int, rng: np.random.Generator, loss: float = 0.2, mean_burst: float = 3.0,
              max_burst: int = 10) -> np.ndarray:
    """Kept batches of a two-state Markov (Gilbert) chain: bursts of mean length ``mean_burst``
    batches, cut at ``max_burst`` (200 ms at 20 ms a batch), ``loss`` of the batches lost in the
    long run (a little less after the cut)."""
    p_bg = 1.0 / mean_burst
    p_gb = loss / (1.0 - loss) * p_bg
    keep = np.ones(n, dtype=bool)
    bad, run = False, 0
    u = rng.random(n)
    for i in range(n):
        if i < 50:  # the first second healthy: the twin starts from the first batch
            continue
        bad = (u[i] >= p_bg and run < max_burst) if bad else u[i] < p_gb
        run = run + 1 if bad else 0
        keep[i] = not bad
    return keep


def bursts(keep: np.ndarray) -> list[int]:
    out, run = [], 0
    for k in keep:
        if not k:
            run += 1
        elif run:
            out.append(run)
            run = 0
    return out + ([run] if run else [])


def publish(url: str, payloads: list[bytes], keep: np.ndarray, jitter: float, seed: int,
            alive: Any, mark: Any) -> dict[int, float]:
    """Each kept payload at its nominal time (every PERIOD) plus U(0, jitter) s, in order; the
    send times (monotonic) by index. ``mark()`` is called once, before message MARK. Stops early
    when ``alive()`` turns false."""
    pub = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=mqtt.MQTTv5)
    pub.connect("127.0.0.1", int(url.rsplit(":", 1)[1]))
    set_nodelay(pub)
    pub.loop_start()
    rnd = random.Random(seed)
    sent: dict[int, float] = {}
    try:
        t_start = time.monotonic() + 0.2
        for i, p in enumerate(payloads):
            delay = rnd.uniform(0.0, jitter) if jitter > 0 else 0.0
            pause = t_start + i * PERIOD + delay - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            if i == MARK:
                mark()
            if keep[i]:
                pub.publish(f"{BASE}/meas/sensors", p, qos=0)
                sent[i] = time.monotonic()
            if i % 50 == 0 and not alive():
                break
    finally:
        pub.disconnect()
        pub.loop_stop()
    return sent


def angle_errors(obs: Observed, truth: Truth, duration: float, batch: int, rate: float) -> dict[str, Any]:
    """RMS / max crank-angle error after SETTLE: (a) at the published times, (b) at each sample's
    true time (from src_seq); the median offset of the published times from the true ones."""
    t_pub, t_true, theta = [], [], []
    for seq, t0, dt, n, th, _ in obs.states:
        last_true = (seq * batch + batch - 1) / rate
        for j in range(n):
            t_pub.append(t0 + j * dt)
            t_true.append(last_true - (n - 1 - j) * dt)
        theta += th
    out: dict[str, Any] = {"state_samples": len(theta)}
    if not theta:
        return out
    tp, tt, th_arr = np.array(t_pub), np.array(t_true), np.array(theta, dtype=float)
    out["time_offset_ms"] = 1e3 * float(np.median(tp - tt))
    for key, t in (("published", tp), ("by_sample", tt)):
        sel = (t >= SETTLE) & (t <= duration - 1.0 / rate) & np.isfinite(th_arr)
        if not sel.any():
            continue
        err = np.remainder(th_arr[sel] - truth.state(t[sel])["theta"] + np.pi, 2 * np.pi) - np.pi
        out[key] = {"rms": float(np.sqrt(np.mean(err ** 2))), "max": float(np.max(np.abs(err))),
                    "n": int(sel.sum())}
    return out


def run_one(speed: float, condition: str, fault_name: str | None, duration: float, stream: Any,
            seed: int) -> dict[str, Any]:
    msgs, truth = stream
    rig = truth.rig
    n = len(msgs)
    rng = np.random.default_rng(seed + 1)
    keep = loss_mask(n, rng) if condition == "lossy" else np.ones(n, dtype=bool)
    jitter = 0.005 if condition == "lossy" else 0.0
    t0_sd = 0.005 if condition == "t0jitter" else 0.0
    t0_err = rng.normal(0.0, t0_sd, n) if t0_sd else np.zeros(n)
    payloads = [json.dumps({**m, "t0": m["t0"] + float(e)}, separators=(",", ":")).encode()
                for m, e in zip(msgs, t0_err, strict=True)]
    res: dict[str, Any] = {"speed": speed, "condition": condition, "fault": fault_name, "duration": duration,
                           "batches": n, "published": int(keep.sum()), "lost_fraction": float(1 - keep.mean()),
                           "bursts": len(bursts(keep)), "longest_burst_ms": 1e3 * PERIOD * max(bursts(keep) or [0]),
                           "t0_jitter_sd_ms": 1e3 * t0_sd, "first_t0_error_ms": 1e3 * float(t0_err[0]),
                           "date": time.strftime("%Y-%m-%d %H:%M"), "load_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="bench-field-") as tmpdir:
        procs = Procs(Path(tmpdir))
        obs: Observer | None = None
        try:
            procs.start_broker()
            obs = Observer(procs.url)
            procs.start_twin()
            assert procs.twin is not None
            if not obs.o.online.wait(60):
                raise RuntimeError(f"the twin did not come online within 60 s:\n{procs.twin_log()}")
            pid = procs.twin.pid
            twin = procs.twin
            time.sleep(0.5)
            cpu0, wall0 = cpu_seconds(pid), time.monotonic()
            marked: list[float] = []
            sent = publish(procs.url, payloads, keep, jitter, seed, lambda: twin.poll() is None,
                           lambda: marked.append(cpu_seconds(pid)))
            # drain: until the state of the last published batch arrived (or 10 s), then a fresh health
            last = max(sent) if sent else -1
            t_end = time.monotonic() + 10
            while time.monotonic() < t_end and twin.poll() is None:
                if obs.o.states and obs.o.states[-1][0] >= last:
                    break
                time.sleep(0.05)
            cpu1, wall1 = cpu_seconds(pid), time.monotonic()
            h_mark = time.monotonic()
            t_end = time.monotonic() + 3
            while time.monotonic() < t_end and not any(h["_arrival"] > h_mark for h in obs.o.health):
                time.sleep(0.05)
            res["twin_exit"] = twin.poll()
            if res["twin_exit"] is not None:
                res["twin_log"] = procs.twin_log()
        finally:
            if obs is not None:
                obs.close()
            procs.stop()
    o = obs.o
    samples = int(keep.sum()) * rig.batch
    res["cpu_s"] = cpu1 - cpu0
    res["cpu_us_per_sample"] = 1e6 * (cpu1 - cpu0) / max(samples, 1)
    res["cpu_fraction"] = (cpu1 - cpu0) / (wall1 - wall0)
    if marked:
        later = int(keep[MARK:].sum()) * rig.batch
        res["cpu_us_per_sample_after_5s"] = 1e6 * (cpu1 - marked[0]) / max(later, 1)
    arrivals = {s: t for s, *_, t in reversed(o.states)}  # the first state per source seq
    lat = np.array([1e3 * (arrivals[i] - t) for i, t in sent.items() if i in arrivals])
    res["states_for_published"] = f"{len(lat)}/{len(sent)}"
    if len(lat):
        res["latency_ms"] = {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
                             "max": float(lat.max())}
    res["angle"] = angle_errors(o, truth, duration, rig.batch, rig.rate)
    raised = [(a["alarm"], a["t"]) for a in o.alarms if a["event"] == "raised"]
    res["alarms"] = raised
    h = o.health[-1] if o.health else {}
    c = h.get("counters", {})
    res["resync"] = {k: v for k, v in c.get("resync", {}).items() if k != "start"}
    res["resync_events"] = [(e["reason"], e["t"]) for e in o.resync_events if e.get("reason") != "start"]
    res["holds"] = sorted({x.get("hold") for x in o.health if "hold" in x} | {x["to"] for x in o.hold_changes})
    res["hold_changes"] = o.hold_changes
    res["counters"] = {k: c.get(k) for k in ("batches", "samples", "gap", "gap_timeout", "gap_predicted", "late",
                                             "dropped_overload", "coalesced", "reorder_waited", "duplicate",
                                             "alarm_suppressed", "diagnosis")}
    res["timing"] = c.get("timing", {})
    res["invalid"] = c.get("invalid", {})
    res["max_lag_s"] = max((x.get("lag_s", 0.0) for x in o.health), default=None)
    res["final_health_warnings"] = h.get("warnings")
    if fault_name:
        fault = ALL_FAULTS[fault_name]
        after = [(a, t) for a, t in raised if t >= fault.onset]
        res["alarms_before_onset"] = [(a, t) for a, t in raised if t < fault.onset]
        if after:
            t_first = min(t for _, t in after)
            res["first_alarm_delay_s"] = t_first - fault.onset
            res["first_alarms"] = sorted({a for a, t in after if t <= t_first + 0.01})
            drift = [t for a, t in after if a.startswith("drift:")]
            if drift:
                res["first_drift_delay_s"] = min(drift) - fault.onset
            if fault.ramp:
                res["level_at_first_alarm"] = float(fault.level(t_first))
                if drift:
                    res["level_at_first_drift"] = float(fault.level(min(drift)))
        if fault_name in FAULTS:
            res["right_quantities"] = sorted(FAULTS[fault_name][1])
            res["expected_cause"] = FAULTS[fault_name][2]
        res["diagnoses"] = [{"alarm": d.get("alarm"), "t": d.get("t"), "onset": d.get("onset"),
                             "explained": d.get("explained"), "problem": d.get("problem"),
                             "top": (d.get("candidates") or [None])[0],
                             "second": (d.get("candidates") or [None, None])[1:2]} for d in o.diagnoses]
    return res


def summary(r: dict[str, Any]) -> str:
    a = r["angle"]
    pub, by = a.get("published", {}), a.get("by_sample", {})
    name = r["fault"] or r["condition"]
    line = (f"{r['speed']:5.0f} rad/s {name:<20} {r['duration']:5.0f} s  alarms={len(r['alarms'])} "
            f"re-inits={sum(r['resync'].values())} {r['resync'] or ''}  angle RMS published="
            f"{pub.get('rms', float('nan')):.2e} by sample={by.get('rms', float('nan')):.2e} rad "
            f"(max {by.get('max', float('nan')):.1e}; time offset {a.get('time_offset_ms', float('nan')):+.2f} ms)  "
            f"CPU {r['cpu_us_per_sample']:.0f} us/sample, {r.get('cpu_us_per_sample_after_5s', float('nan')):.0f} "
            f"after 5 s ({100 * r['cpu_fraction']:.0f} % of a core)  "
            f"holds={r['holds']}  lost={100 * r['lost_fraction']:.1f} %")
    if r["fault"]:
        top = r["diagnoses"][0]["top"] if r.get("diagnoses") else None
        line += (f"\n      first alarm +{1e3 * r.get('first_alarm_delay_s', float('nan')):.0f} ms "
                 f"{r.get('first_alarms')}  before onset: {len(r['alarms_before_onset'])}  diagnosis top: "
                 + (f"{top['name']} size={top['size']:.4g} p={top['probability']:.3f}" if top
                    else (r["diagnoses"][0]["problem"] or "no candidates") if r.get("diagnoses") else "none"))
        if "level_at_first_drift" in r:
            line += (f"  first drift alarm +{r['first_drift_delay_s']:.2f} s at "
                     f"{r['level_at_first_drift']:.3f} N·m")
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed", default="38", help="rad/s, comma-separated for several")
    ap.add_argument("--duration", type=float, default=None,
                    help="s of rig time (default 300 healthy table, 20 step faults, 40 the ramp)")
    ap.add_argument("--condition", default="healthy", help=f"comma-separated of {', '.join(CONDITIONS)} or 'all'")
    ap.add_argument("--fault", default="", help=f"comma-separated of {', '.join(ALL_FAULTS)} or 'all' (at 38 rad/s "
                                                "unless --speed)")
    ap.add_argument("--all", action="store_true", help="the whole table: 4 speeds x 3 conditions, the ramp, the faults")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default="", help="append each run's figures as a JSON line to this file")
    args = ap.parse_args()
    runs: list[tuple[float, str, str | None, float]] = []
    speeds = [float(s) for s in args.speed.split(",")]
    conds = list(CONDITIONS) if args.condition == "all" else args.condition.split(",")
    faults = list(ALL_FAULTS) if args.fault == "all" else [f for f in args.fault.split(",") if f]
    for c in conds:
        if c not in CONDITIONS:
            ap.error(f"unknown condition {c!r}")
    for f in faults:
        if f not in ALL_FAULTS:
            ap.error(f"unknown fault {f!r}; one of {', '.join(ALL_FAULTS)}")
    if args.all:
        runs += [(s, c, None, args.duration or 300.0) for s in SPEEDS for c in CONDITIONS]
        runs += [(38.0, "healthy", f, 40.0 if f == "friction_ramp" else 20.0) for f in ALL_FAULTS]
    elif faults:
        runs += [(s, "healthy", f, args.duration or (40.0 if f == "friction_ramp" else 20.0))
                 for s in speeds for f in faults]
    else:
        runs += [(s, c, None, args.duration or 300.0) for s in speeds for c in conds]
    print(f"bench_field: {len(runs)} run(s); {os.cpu_count()} CPUs, load {os.getloadavg()}; fault onset "
          f"{ONSET} s (ramp {RAMP_ONSET} s)", flush=True)
    streams: dict[tuple[Any, ...], Any] = {}
    for speed, cond, fname, duration in runs:
        faults_ = (ALL_FAULTS[fname],) if fname else ()
        key = (speed, duration, faults_)
        if key not in streams:
            streams.clear()  # one stream in memory at a time
            t = time.perf_counter()
            streams[key] = messages(Rig(speed=speed, seed=args.seed, faults=faults_), duration)
            print(f"rig {speed:g} rad/s {fname or ''} {duration:g} s generated in {time.perf_counter() - t:.1f} s",
                  flush=True)
        r = run_one(speed, cond, fname, duration, streams[key], args.seed)
        print(summary(r), flush=True)
        print("RESULT " + json.dumps(r), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
