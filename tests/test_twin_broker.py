"""The twin service against a real broker (tests/conftest.py): clean stream, faults, broker
restart, SIGKILL will, overload, command round trip and replay of the recording."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from mbsd_twin import load_mechanism
from mbsd_twin.rig.client import Rig
from mbsd_twin.rig.faults import RigFault
from mbsd_twin.rig.synthetic import RigConfig, Trajectory
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import AlarmConfig
from mbsd_twin.twin.recorder import replay
from mbsd_twin.twin.service import TwinService

MECH = "examples/mechanisms/slider_crank.toml"
BASE = "dt/v1/sc-01"


@pytest.fixture(scope="module")
def trajectory() -> Trajectory:
    tr = Trajectory(load_mechanism(MECH), RigConfig())
    tr.samples(0, 11000)  # 11 s precomputed once (the engine is slower than real time here)
    return tr


class Collector:
    """Subscribes to everything under the asset; keeps (receive time, payload) per topic."""

    def __init__(self, url: str, mqtt5: bool = True) -> None:
        self.msgs: dict[str, list[tuple[float, Any]]] = defaultdict(list)
        self.lock = threading.Lock()
        proto = mqtt.MQTTv5 if mqtt5 else mqtt.MQTTv311
        self.c = mqtt.Client(CallbackAPIVersion.VERSION2, protocol=proto)
        self.c.on_connect = lambda c, *a: c.subscribe(f"{BASE}/twin/#", qos=1)
        self.c.on_message = self._on
        self.c.reconnect_delay_set(1, 2)
        host, port = url.removeprefix("mqtt://").split(":")
        self.c.connect(host, int(port))
        self.c.loop_start()
        _wait(self.c.is_connected, 5)

    def _on(self, c: Any, u: Any, m: mqtt.MQTTMessage) -> None:
        body = json.loads(m.payload) if m.payload else None
        with self.lock:
            self.msgs[m.topic.removeprefix(BASE + "/")].append((time.monotonic(), body))

    def get(self, leaf: str) -> list[Any]:
        with self.lock:
            return [b for _, b in self.msgs.get(leaf, [])]

    def close(self) -> None:
        self.c.disconnect()
        self.c.loop_stop()


def _wait(cond: Any, timeout: float) -> bool:
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if cond():
            return True
        time.sleep(0.02)
    return bool(cond())


def _config(broker: Any, tmp_path: Any, **over: dict[str, Any]) -> Any:
    sections: dict[str, dict[str, Any]] = {
        "broker": {"url": broker.url, "protocol": 5 if broker.mqtt5 else 4},
        "service": {"mechanism": MECH},
        "core": {"resync_bounds": {"theta": 0.01}},
    }
    for k, v in over.items():
        sections.setdefault(k, {}).update(v)
    return load_config(None, env={}, overrides=sections)


def test_clean_stream(broker: Any, tmp_path: Any, trajectory: Trajectory) -> None:
    col = Collector(broker.url, broker.mqtt5)
    # no coalescing (max_lag): a stall of this process on a loaded machine must not skip batches, whose
    # gaps would show in the residuals (overload has its own tests)
    with TwinService(_config(broker, tmp_path, service={"max_lag": 10.0})) as svc:
        assert _wait(svc.connected.is_set, 5)
        manifest = Rig(svc.mech, RigConfig(), broker.url, traj=trajectory, protocol=broker.protocol).run(10.0)
        _wait(lambda: not svc.batches, 10)
        time.sleep(0.5)
        health = svc.health()
    col.close()
    res = col.get("twin/residuals")
    theta = np.concatenate([r["ch"]["theta"] for r in res])
    rms = float(np.sqrt(np.mean(theta**2)))
    print(f"theta residual rms {rms:.4g} rad over {theta.size} samples; health {health}")
    assert rms < 3 * manifest["noise"]["theta"]
    for leaf in ("twin/state", "twin/residuals", "twin/virtual"):
        msgs = col.get(leaf)
        seqs = [m["seq"] for m in msgs]
        assert len(msgs) > 100 and all(b > a for a, b in zip(seqs, seqs[1:], strict=False)), leaf
        assert all(math.isfinite(x) for m in msgs for v in m["ch"].values() for x in v), leaf
    assert "crank_pin.fx" in col.get("twin/virtual")[-1]["ch"] and col.get("twin/latest")
    assert col.get("twin/status")[0]["state"] == "online" and col.get("twin/health")


def test_estimator_through_the_service(broker: Any, tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The estimator's targets through the real service on a real broker with default settings
    (only the broker and mechanism given): a model-exact 1 kHz rig stream with 1 mrad encoder noise
    and +0.3 N·m bearing friction from 4 s. Before the fault: crank-angle innovation RMS ≤ 1.2e-3
    rad after 1 s, no re-initialisation after the start, no alarm; the fault is alarmed within
    0.25 s of its onset (rig time), naming a statistic it acts on; /metrics carries the estimates.
    (Latency and hold levels are measured by benchmarks/bench_twin.py, not asserted here.)"""
    onset = 4.0
    rig_cfg = RigConfig(mismatch={}, faults=(RigFault("friction", onset, "main_bearing", 0.3),))
    import urllib.request

    from conftest import free_port

    port = free_port()
    cfg = load_config(None, env={}, overrides={"broker": {"url": broker.url, "protocol": broker.protocol},
                                               "service": {"mechanism": MECH}, "metrics": {"port": port}})
    col = Collector(broker.url, broker.mqtt5)
    caplog.set_level(logging.INFO, logger="mbsd_twin.twin")
    published: list[dict[str, Any]] = []
    with TwinService(cfg) as svc:
        svc.taps.append(lambda o: published.append(json.loads(o.payload)) if o.topic.endswith("/twin/alarms") else None)
        assert _wait(svc.connected.is_set, 5)
        rig = Rig(svc.mech, rig_cfg, broker.url, protocol=broker.protocol)
        rig.precompute(6.0)
        rig.run(6.0)
        _wait(lambda: not svc.batches, 10)
        time.sleep(0.3)
        health = svc.health()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    col.close()
    last = col.get("twin/estimates")[-1]["ch"]  # /metrics carries the last sample's estimates and σ
    for key, metric in (("motor_torque.bias", 'twin_estimate{name="motor_torque.bias"}'),
                        ("crank.theta.sd", 'twin_estimate_sd{name="crank.theta"}')):
        line = next(x for x in metrics.splitlines() if x.startswith(metric))
        assert float(line.split()[-1]) == pytest.approx(last[key][-1], rel=1e-12), line
    assert "twin_change_alarms_total{statistic=" in metrics
    states = col.get("twin/state")
    epoch = states[0]["t0"]  # rig time of the stream's first sample
    t = np.concatenate([[m["t0"] + k * m["dt"] for k in range(m["n"])] for m in col.get("twin/residuals")])
    theta = np.concatenate([m["ch"]["theta"] for m in col.get("twin/residuals")])
    before = (t - epoch > 1.0) & (t - epoch < onset)
    rms = float(np.sqrt(np.mean(theta[before] ** 2)))
    alarms = [a for a in col.get("twin/alarms") if a["event"] == "raised"]
    print(f"innovation rms {rms:.3g} rad; alarms {[(a['alarm'], a['t'] - epoch) for a in alarms]}; health {health}")
    resyncs_before = sum(m["resyncs"] for m in col.get("twin/residuals")[1:] if m["t0"] - epoch < onset)
    assert rms <= 1.2e-3 and health["counters"]["resync"]["start"] == 1 and resyncs_before == 0
    assert alarms and all(a["t"] - epoch >= onset for a in alarms)
    first = alarms[0]
    assert first["t"] - epoch - onset <= 0.25 and first["channel"] in {"motor_torque.bias", "f_x", "f_y", "omega"}
    _check_event_log(caplog, svc, published, health["counters"]["dropped_overload"])  # each alarm in the log


# slow: a real-time twin through a broker, its counts asserted exactly; failed beside the parallel
# suite on a slow 2-core machine (this stop's CI run)
@pytest.mark.slow
def test_faults_counted_exactly(broker: Any, tmp_path: Any, trajectory: Trajectory) -> None:
    col = Collector(broker.url, broker.mqtt5)
    # a large max_lag/queue: CPU hiccups (rig and twin share a process here) must not cause overload
    # drops, which would be counted on top of the injected faults (overload has its own test)
    cfg = _config(broker, tmp_path, service={"start_level": 2, "max_lag": 10.0, "queue_size": 500})
    with TwinService(cfg) as svc:
        assert _wait(svc.connected.is_set, 5)
        rig = Rig(svc.mech, RigConfig(seed=7), broker.url, traj=trajectory, protocol=broker.protocol)
        manifest = rig.run(8.0, faults=0.04)
        assert _wait(lambda: not svc.batches and not svc.seq.buffer, 10)
        time.sleep(0.3)
        h = svc.health()["counters"]
        n_state = len(col.get("twin/state"))
        rig.run(1.0, seq0=manifest["messages"] + 10)  # alive and tracking afterwards
        assert _wait(lambda: len(col.get("twin/state")) >= n_state + 40, 10)
    col.close()
    exp = manifest["expected"]
    print("manifest", manifest["faults"], exp, "counted", h)
    assert len(manifest["faults"]) >= 10 and set(manifest["faults"].values()) >= {"drop", "late", "nan"}
    for key in ("gap", "late", "duplicate", "reordered"):
        assert h[key] == exp[key], key
    assert h["invalid"] == exp["invalid"] and h["dropped_overload"] == 0
    last = col.get("twin/residuals")[-1]["ch"]["theta"]
    assert max(abs(x) for x in last) < 0.01


def test_broker_restart_reconnects(broker: Any, tmp_path: Any, trajectory: Trajectory) -> None:
    col = Collector(broker.url, broker.mqtt5)
    with TwinService(_config(broker, tmp_path, service={"start_level": 2})) as svc:
        assert _wait(svc.connected.is_set, 5)
        rig = Rig(svc.mech, RigConfig(), broker.url, traj=trajectory, protocol=broker.protocol)
        th = threading.Thread(target=rig.run, args=(7.0,))
        th.start()
        time.sleep(2.0)
        broker.stop()
        time.sleep(1.5)
        broker.start()
        th.join()
        time.sleep(0.5)
        health = svc.health()
    col.close()
    births = [m for m in col.get("twin/status") if m["state"] == "online"]
    assert [b["session"] for b in births][-1] == 2 and svc.connects == 2
    t_state = [t for t, _ in col.msgs["twin/state"]]
    assert t_state and t_state[-1] - t_state[0] > 3.0  # output resumed after the outage
    assert health["connection"]["outages"] == 1 and health["connection"]["last_outage_s"] > 1.0


def _serve(broker: Any) -> subprocess.Popen[bytes]:
    toml = broker.workdir / "serve.toml"
    toml.write_text(f"[broker]\nprotocol = {broker.protocol}\n")
    return subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "twin", "serve", "--broker", broker.url,
                             "--asset", "sc-01", "--mechanism", MECH, "--config", str(toml)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "MBSD_TWIN_BROKER": ""})


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_offline_on_kill_and_term(broker: Any, sig: int) -> None:
    col = Collector(broker.url, broker.mqtt5)
    proc = _serve(broker)
    try:
        assert _wait(lambda: any(m["state"] == "online" for m in col.get("twin/status")), 20)
        proc.send_signal(sig)
        assert _wait(lambda: col.get("twin/status")[-1]["state"] == "offline", 5)
        assert proc.wait(10) in (0, -signal.SIGKILL)
    finally:
        proc.kill()
        col.close()


def test_overload_bounded(broker: Any, tmp_path: Any, trajectory: Trajectory,
                          caplog: pytest.LogCaptureFixture) -> None:
    alarm = AlarmConfig("theta", "theta", "residual", high=0.003, low=0.002, min_duration=0.0)
    cfg = _config(broker, tmp_path, service={"queue_size": 20, "lag_high": 0.05},
                  core={"alarms": (alarm,), "alarm_max_events_per_minute": 4})
    col = Collector(broker.url, broker.mqtt5)
    caplog.set_level(logging.INFO, logger="mbsd_twin.twin")
    published: list[dict[str, Any]] = []
    with TwinService(cfg) as svc:
        svc.taps.append(lambda o: published.append(json.loads(o.payload)) if o.topic.endswith("/twin/alarms") else None)
        assert _wait(svc.connected.is_set, 5)
        rig = Rig(svc.mech, RigConfig(rate=10000.0, batch=10), broker.url, traj=trajectory, protocol=broker.protocol)
        rig.precompute(6.0)
        rss0 = _rss_mb()
        rig.run(6.0)
        h = svc.health()
        rss1 = _rss_mb()
    col.close()
    print("overload health", h, f"rss {rss0:.0f} -> {rss1:.0f} MB")
    c = h["counters"]
    assert c["dropped_overload"] > 0 and h["hold"] == cfg.service.hold_levels[-1] and h["lag_s"] > 0
    assert h["queue_depth"] <= cfg.service.queue_size and rss1 - rss0 < 100
    # dropped batches leave gaps: predicted through by the filter (up to max_gap) or re-initialised
    assert c["gap_predicted"] + c["resync"].get("gap", 0) > 0
    # at most 4 raises per alarm and minute (the run lasts 6 s); every clear follows its own raise
    events = col.get("twin/alarms")
    raised = [e["alarm"] for e in events if e["event"] == "raised"]
    assert max(Counter(raised).values(), default=0) <= 4
    open_alarms: set[str] = set()
    for e in events:
        assert (e["alarm"] in open_alarms) == (e["event"] == "cleared"), e
        (open_alarms.add if e["event"] == "raised" else open_alarms.discard)(e["alarm"])
    _check_event_log(caplog, svc, published, c["dropped_overload"])


def _check_event_log(caplog: pytest.LogCaptureFixture, svc: TwinService, published: list[dict[str, Any]],
                     dropped_before: int = 0) -> None:
    """The twin's INFO log (twin/eventlog.py) says every published alarm (name, event, rig time),
    every hold change as a chain from the start level to the last one, every re-initialisation
    with its reason, and the stop with the final counts."""
    lines = [r.getMessage() for r in caplog.records if r.name == "mbsd_twin.twin"]
    logged = [line.split()[1:6] for line in lines if line.startswith("alarm ")]
    assert logged == [[e["alarm"], e["event"], "at", "t", "="] for e in published]
    assert [float(line.split()[6].rstrip(":")) for line in lines if line.startswith("alarm ")] == \
        pytest.approx([e["t"] for e in published], abs=5e-4)
    levels = svc.cfg.service.hold_levels
    chain = [tuple(int(x) for x in line.split()[2:5:2]) for line in lines if line.startswith("solver hold")]
    hold = levels[svc.cfg.service.start_level]
    for a, b in chain:
        assert a == hold and b != a
        hold = b
    assert hold == levels[svc.overload.level]
    resyncs = [line for line in lines if line.startswith("re-initialised")]
    assert sum(svc.core.stats["resync"].values()) == int(resyncs[-1].split("; ")[-1].split()[0])
    for reason in svc.core.stats["resync"]:
        assert any(f"({reason}" in line or f", {reason}" in line for line in resyncs), reason
    (stop,) = [line for line in lines if line.startswith("stopped:")]
    st = svc.core.stats
    head = f"stopped: {st['batches']} batches ({st['samples']} samples) processed, "
    assert stop.startswith(head)
    dropped = int(stop.removeprefix(head).split()[0])  # at the stop: messages still arriving are dropped after it
    assert dropped_before <= dropped <= svc.counts["dropped_overload"]
    assert f"dropped under overload, {sum(e['event'] == 'raised' for e in published)} alarms raised" in stop


def _rss_mb() -> float:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024


def test_command_round_trip_and_replay(broker: Any, tmp_path: Any, trajectory: Trajectory) -> None:
    rec = str(tmp_path / "rec.jsonl")
    col = Collector(broker.url, broker.mqtt5)
    with TwinService(_config(broker, tmp_path, record={"path": rec}, commands={"enabled": ["reset"]})) as svc:
        assert _wait(svc.connected.is_set, 5)
        rig = Rig(svc.mech, RigConfig(), broker.url, traj=trajectory, protocol=broker.protocol)
        th = threading.Thread(target=rig.run, args=(3.0,))
        th.start()
        time.sleep(1.5)
        reply_topic = f"{BASE}/twin/reply/test"
        props = Properties(PacketTypes.PUBLISH)
        props.ResponseTopic, props.CorrelationData = reply_topic, b"abc"
        t0 = time.monotonic()
        col.c.publish(f"{BASE}/twin/cmd/reset", b"{}", qos=1, properties=props if broker.mqtt5 else None)
        leaf = "twin/reply/test" if broker.mqtt5 else "twin/reply"
        assert _wait(lambda: col.get(leaf), 1.0), "no reply within 1 s"
        dt = [t for t, _ in col.msgs[leaf]][0] - t0
        th.join()
        _wait(lambda: not svc.batches, 10)
    col.close()
    print(f"reset answered in {1e3 * dt:.1f} ms: {col.get(leaf)[0]}")
    assert col.get(leaf)[0]["ok"] and svc.core.stats["resync"]["reset"] == 1
    res = replay(rec)
    assert res.identical and res.recorded > 100
    live = [json.dumps(m, sort_keys=True) for m in col.get("twin/state")]
    replayed = [json.dumps(json.loads(p), sort_keys=True) for t, p in res.outputs if t.endswith("/state")]
    assert live == replayed


# slow: a real-time twin through a broker, its counts asserted exactly; failed beside the parallel
# suite on a slow 2-core machine (this stop's CI run)
@pytest.mark.slow
def test_rig_restart(broker: Any, tmp_path: Any, trajectory: Trajectory, caplog: pytest.LogCaptureFixture) -> None:
    """The rig restarts: seq back to 0 under a new session, announced by its birth on meas/status.
    Counted once; no gap/late/duplicate counts; the model re-syncs at the new session's first batch
    (reason rig_restart — processed in order after the old session's batches) and keeps tracking;
    the recording replays identically across the restart."""
    rec = str(tmp_path / "rec.jsonl")
    col = Collector(broker.url, broker.mqtt5)
    caplog.set_level(logging.INFO, logger="mbsd_twin.twin")
    with TwinService(_config(broker, tmp_path, record={"path": rec})) as svc:
        assert _wait(svc.connected.is_set, 5)
        first = Rig(svc.mech, RigConfig(), broker.url, traj=trajectory, protocol=broker.protocol)
        first.run(2.0)
        second = Rig(svc.mech, RigConfig(seed=1), broker.url, traj=trajectory, protocol=broker.protocol)
        assert second.session != first.session
        second.run(2.0)
        assert _wait(lambda: not svc.batches and len(col.get("twin/residuals")) >= 200, 60)
        h = svc.health()
    col.close()
    c = h["counters"]
    print("after a rig restart:", c)
    assert c["rig_restart"] == 1 and c["restart"] == 0 and c["rig_online"] == 2
    assert (c["gap"], c["late"], c["duplicate"], c["reordered"], c["dropped_overload"]) == (0, 0, 0, 0, 0)
    assert c["received"] == c["batches"] == 200
    assert c["resync"]["rig_restart"] == 1 and c["resync"]["start"] == 1 and "gap" not in c["resync"]
    res = col.get("twin/residuals")
    assert [m["seq"] for m in res] == list(range(1, 201))  # the twin's own seq keeps counting
    assert [m["src_seq"][0] for m in res] == [*range(100), *range(100)]
    theta = np.concatenate([m["ch"]["theta"] for m in res[100:]])  # the new session
    assert float(np.sqrt(np.mean(theta**2))) < 3 * RigConfig().noise["theta"]
    assert res[100]["t0"] > res[99]["t0"]
    assert replay(rec).identical
    lines = [r.getMessage() for r in caplog.records if r.name == "mbsd_twin.twin"]
    assert sum(line.startswith("rig restarted") for line in lines) == 1
    assert [line.split("(")[1].split(")")[0] for line in lines if line.startswith("re-initialised")] == \
        ["start", "rig_restart"]


def test_metrics_health_ready(broker: Any, tmp_path: Any) -> None:
    import urllib.request

    from conftest import free_port

    port = free_port()
    with TwinService(_config(broker, tmp_path, metrics={"port": port})) as svc:
        assert _wait(svc.connected.is_set, 5)
        get = lambda p: urllib.request.urlopen(f"http://127.0.0.1:{port}{p}", timeout=2)  # noqa: E731
        assert b"twin_connected 1.0" in get("/metrics").read()
        assert json.loads(get("/healthz").read())["connected"] is True
        assert get("/readyz").status == 200
