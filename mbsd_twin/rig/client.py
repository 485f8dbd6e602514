"""Streams a synthetic rig (:mod:`.synthetic`) to a broker in real time, with its will and birth, and
returns the manifest of injected faults with the counters the twin should report."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from ..model.model import Mechanism
from ..twin.config.sections import BrokerConfig
from ..twin.link import set_nodelay
from ..twin.protocol import Topics, encode
from ..twin.redaction import redact
from .messages import expected_counts, message_plan, payload, schedule
from .synthetic import MessageSource, RigConfig, Trajectory, fault_manifest


def connect(url: str, client_id: str, will: tuple[str, str] | None = None, protocol: int = 5,
            auth: tuple[str, str] | None = None) -> mqtt.Client:
    """A connected paho client (MQTT 5 or 3.1.1) with its loop running and TCP_NODELAY on every
    connection (else Nagle's algorithm holds small messages back by ~20-40 ms); raises after 10 s
    without a connection. ``auth``: (user name, password)."""
    b = BrokerConfig(url=url)
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                    protocol=mqtt.MQTTv5 if protocol == 5 else mqtt.MQTTv311)
    if auth:
        c.username_pw_set(*auth)
    if will:
        c.will_set(will[0], will[1], qos=1, retain=True)
    c.on_connect = lambda client, *args: set_nodelay(client)
    try:
        c.connect(b.host, b.port, keepalive=30)
    except OSError as exc:
        raise ConnectionError(f"the rig cannot connect to {redact(url, url)}: {exc}") from exc
    c.loop_start()
    t_end = time.monotonic() + 10
    while not c.is_connected():
        if time.monotonic() > t_end:
            c.loop_stop()
            raise ConnectionError(f"the rig got no MQTT connection to {redact(url, url)} within 10 s")
        time.sleep(0.01)
    return c


class Rig:
    def __init__(self, mech: Mechanism, cfg: RigConfig, url: str, window: int = 5,
                 traj: Trajectory | None = None, protocol: int = 5) -> None:
        self.cfg, self.url, self.window, self.protocol = cfg, url, window, protocol
        self.topics = Topics(f"{cfg.prefix}/{cfg.asset}")
        self.traj = traj.with_rate(cfg.rate, cfg.batch) if traj else Trajectory(mech, cfg)
        self.session = uuid.uuid4().hex[:8]
        self.sent_at: dict[int, float] = {}  # seq → monotonic time handed to the client (latency measurements)

    def precompute(self, duration: float, progress: Callable[[float], None] | None = None) -> None:
        """Simulate the hidden model for ``duration`` s ahead of streaming (in tenths, told to ``progress``)."""
        n = max(1, int(duration * self.cfg.rate))
        for k in range(1, 11 if progress else 2):
            self.traj.samples(0, n * k // (10 if progress else 1))
            if progress:
                progress(k / 10)

    def run(self, duration: float, faults: float = 0.0, seq0: int = 0,
            client: mqtt.Client | None = None, progress: Callable[[float], None] | None = None) -> dict[str, Any]:
        """Stream ``duration`` s in real time; the manifest: message-level ``faults`` (seq → kind) with
        the ``expected`` counters, and ``rig_faults``, the injected model and sensor faults with their
        onset (requested), ``sample`` and ``effective`` rig time (:func:`.synthetic.fault_manifest`).
        ``progress`` is told the fraction sent about twice a second."""
        c, truth = self.cfg, self.traj.cfg  # the trajectory's (a shared one's) noise, mismatch and faults
        n_msg = int(duration * c.rate / c.batch)
        plan = message_plan(truth, n_msg, faults, self.window)
        order = schedule(n_msg, plan, self.window)
        own = client is None
        cl = client or connect(self.url, f"rig-{c.asset}-{self.session}",
                               (self.topics.rig_status, encode({"state": "offline", "session": self.session})),
                               self.protocol)
        cl.publish(self.topics.rig_status, encode({"state": "online", "session": self.session}), qos=1, retain=True)
        src = MessageSource(self.traj, time.time(), seq0)
        cache: dict[int, dict[str, Any]] = {}
        period = c.batch / c.rate
        t_start = time.monotonic()
        behind = 0
        for k, (i, how) in enumerate(order):
            body = payload(src, i, how, cache)
            t_due = t_start + (min(k, i) + 1) * period
            wait = t_due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            elif wait < -period:
                behind += 1
            t_send = time.monotonic()
            cl.publish(self.topics.sensors, body, qos=0)
            if how == "ok":
                self.sent_at.setdefault(seq0 + i, t_send)
            if progress is not None and (k % 25 == 24 or k == len(order) - 1):
                progress((k + 1) / len(order))
        manifest = {"asset": c.asset, "session": self.session, "messages": n_msg, "sent": len(order),
                    "seed": c.seed, "fault_rate": faults, "faults": {str(seq0 + i): k for i, k in sorted(plan.items())},
                    "expected": expected_counts(plan), "late_sends": behind,
                    "noise": truth.noise, "mismatch": truth.mismatch, "rig_faults": fault_manifest(truth)}
        if own:
            cl.publish(self.topics.rig_status, encode({"state": "offline", "session": self.session}),
                       qos=1, retain=True).wait_for_publish(2)
            cl.disconnect()
            cl.loop_stop()
        return manifest


def write_manifest(manifest: dict[str, Any], path: str | None) -> None:
    text = json.dumps(manifest, indent=1, sort_keys=True)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    else:
        print(text)
