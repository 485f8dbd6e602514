"""The fleet's own retained status topic (docs/fleet.md, "Fleet status"): ``{p}/fleet/status``.

The fleet process publishes one JSON document per asset state: at its start, at every change (an
asset added, removed, dying, back) and every ``[fleet] status_interval`` s, retained, QoS 1, with a
retained will ``{"state": "offline", …}``. What it says per asset comes from two sources:

- the fleet itself: an asset added or changed is ``starting``, a removed one ``stopped``; the local
  backend reports a dead process (``restarting``) and one given up after ``max_restarts``
  (``failed``);
- the twins' own retained ``{p}/{a}/twin/status``, believed only as far as :mod:`.trust`
  confirms it: an ``online`` birth whose instance holds the asset's lease in the checkpoint store
  (and, locally, whose pid is the fleet's own child) makes the asset ``running`` (pid, instance,
  Ray node id from the lease; the checkpoint's ``gap_s`` from the birth, checked); on Ray the
  ``offline`` will of the running instance makes it ``restarting`` (locally the fleet sees its
  processes die itself and ignores wills); a confirmed birth of a new instance while the asset was
  ``running`` (a Ray node lost: the orphan's will may come later or never) counts a restart too.

A lease taken before the fleet's (re)start of that asset is stale (a retained birth of an earlier
run). Messages not believed are counted in the status's ``counts``; so are publications of the
status the broker refused (its ACL: logged once).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as mqtt

from ..twin import link
from ..twin.config.sections import BrokerConfig
from ..twin.protocol import encode
from ..twin.redaction import redact
from .trust import Witness, parse

log = logging.getLogger("mbsd_twin.fleet")

STATES = ("starting", "running", "restarting", "stopped", "failed")


@dataclass
class AssetStatus:
    """One asset's entry of the fleet status (times are Unix wall time in s)."""

    name: str  # the asset id
    backend: str  # "local" or "ray"
    t_start: float = field(default_factory=time.time)  # the fleet (re)started it: earlier births are stale
    state: str = "starting"  # one of STATES
    since: float = field(default_factory=time.time)  # when ``state`` was entered
    restarts: int = 0  # unplanned restarts since the fleet (re)started it (deaths, node losses)
    last_restart: float | None = None  # started_at of the instance that came back last; None: none
    gap_s: float | None = None  # s from the checkpoint to the current instance's start; None: started fresh
    checkpoint_rejected: str | None = None  # why the current instance did not resume from its checkpoint
    pid: int | None = None
    node_id: str | None = None  # Ray node id (None for the local backend)
    instance: str | None = None  # the twin's ``instance`` of its current birth

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("name", "t_start")}


class FleetStatus:
    """The fleet status publisher: ``watch`` / ``stopped`` / ``dead`` from the fleet, births and
    wills from the broker, ``tick`` from the fleet's poll loop (publishes when something changed or
    every ``interval`` s), ``close`` at the fleet's stop (state ``offline``, every asset ``stopped``)."""

    def __init__(self, broker: BrokerConfig, topic: str, backend: str, interval: float, fleet: str, store: str,
                 pid_of: Callable[[str], int | None] | None) -> None:
        """``store``: the checkpoint store (its leases confirm births); ``pid_of``: the local
        backend's pid of an asset's process (None: Ray, whose twins' wills are believed instead)."""
        self.topic, self.backend, self.interval = topic, backend, interval
        self.counts = {"births_ignored": 0, "wills_ignored": 0, "messages_ignored": 0, "publish_refused": 0,
                       "publish_failed": 0}
        self.witness = Witness(store, pid_of, self.counts)
        self.wills = pid_of is None
        self.head = {"v": 1, "fleet": fleet, "host": socket.gethostname(), "pid": os.getpid(),
                     "backend": backend, "started_at": time.time()}
        self.assets: dict[str, AssetStatus] = {}
        self.by_topic: dict[str, str] = {}  # a twin's status topic → its asset
        self.lock = threading.Lock()
        self.dirty = True
        self.next = 0.0
        self.seq = 0
        will = encode({**self.head, "state": "offline"})
        self.broker = broker
        self.client = link.make_client(broker, f"mbsd-fleet-{uuid.uuid4().hex[:8]}", (topic, will))
        self.client.on_connect, self.client.on_message = self._on_connect, self._on_message
        self.client.on_publish = self._on_publish
        self.client.connect_async(broker.host, broker.port, keepalive=broker.keepalive)
        self.retry_at, self.backoff, self.problem = 0.0, broker.reconnect_min, ""
        os.register_at_fork(after_in_child=self._in_child)

    def loop(self, timeout: float) -> None:
        """The client's network I/O for up to ``timeout`` s, in the caller's thread (the fleet's
        main loop). No thread of its own: the local backend forks twins from this process, and a
        fork while another thread is inside the interpreter (a DNS lookup importing its codec) left
        the child unable to resolve its broker. Reconnects with the twin's backoff
        (``[broker] reconnect_min`` doubling up to ``reconnect_max``)."""
        if self.client.socket() is None:
            now = time.monotonic()
            if now < self.retry_at:
                time.sleep(timeout)
                return
            try:
                self.client.reconnect()
            except (OSError, ValueError) as exc:
                self.retry_at, self.backoff = now + self.backoff, min(2 * self.backoff, self.broker.reconnect_max)
                if str(exc) != self.problem:
                    log.warning("fleet status: cannot connect to %s: %s; retrying", redact(self.broker.url),
                                redact(str(exc), self.broker.url))
                self.problem = str(exc)
                time.sleep(timeout)
                return
        if self.client.loop(timeout) != mqtt.MQTT_ERR_SUCCESS:
            self.retry_at = time.monotonic() + self.backoff

    def _in_child(self) -> None:
        """A forked twin process must not hold the fleet's connection open (the fleet's will would
        never fire while a child lives): close the child's copy of the socket."""
        sock = self.client.socket()
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.close()

    # -------------------------------------------------------------- from the fleet
    def watch(self, asset: str, twin_status_topic: str) -> None:
        """The fleet starts (or restarts after a change) ``asset``: a fresh entry, ``starting``."""
        with self.lock:
            self.assets[asset] = AssetStatus(asset, self.backend)
            self.by_topic[twin_status_topic] = asset
            self.dirty = True
        self.client.subscribe(twin_status_topic, qos=1)

    def stopped(self, asset: str) -> None:
        with self.lock:
            if asset in self.assets:
                self._set(self.assets[asset], "stopped")
            for t in [t for t, a in self.by_topic.items() if a == asset]:
                del self.by_topic[t]
                self.client.unsubscribe(t)

    def dead(self, assets: dict[str, bool]) -> None:
        """Assets whose process is not alive (local backend): True when given up (``failed``)."""
        with self.lock:
            for asset, given_up in assets.items():
                r = self.assets.get(asset)
                if r is not None and r.state != "stopped":
                    self._died(r, "failed" if given_up else "restarting")

    def tick(self, now: float) -> None:
        confirmed = self.witness.confirm(self._t_start)  # the store's word on the births waiting
        with self.lock:
            for asset, (_, fields) in confirmed.items():
                r = self.assets.get(asset)
                if r is not None and r.state != "stopped":
                    self._birth(r, fields)
            due = self.dirty or now >= self.next
        if due and self.client.is_connected():
            self.publish(now)

    def publish(self, now: float, state: str = "online") -> mqtt.MQTTMessageInfo:
        with self.lock:
            self.dirty, self.next = False, now + self.interval
            self.seq += 1
            body = {**self.head, "state": state, "seq": self.seq, "t": time.time(), "counts": dict(self.counts),
                    "assets": {a: r.to_json() for a, r in sorted(self.assets.items())}}
        info = self.client.publish(self.topic, encode(body), qos=1, retain=True)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            self.counts["publish_failed"] += 1
            if self.counts["publish_failed"] == 1:
                log.error("fleet status: publishing on %s failed (%s)", self.topic, mqtt.error_string(info.rc))
        return info

    def _on_publish(self, client: mqtt.Client, userdata: Any, mid: int, rc: Any, props: Any = None) -> None:
        """The broker's answer to a publication of the status (MQTT 5: a refusal has a reason code;
        MQTT 3.1.1 brokers drop a refused message silently)."""
        if getattr(rc, "is_failure", False):
            self.counts["publish_refused"] += 1
            if self.counts["publish_refused"] == 1:  # logged once; counted in the status's counts
                log.error("fleet status: the broker refused the publication on %s (%s): the fleet's user needs "
                          "write access to it (docs/fleet.md, \"Access control\")", self.topic, rc)

    def _t_start(self, asset: str) -> float | None:
        r = self.assets.get(asset)
        return None if r is None or r.state == "stopped" else r.t_start

    def close(self) -> None:
        """State ``offline`` with every asset ``stopped`` (waits up to 5 s for the broker), then a
        clean disconnect (the will is not sent)."""
        with self.lock:
            for r in self.assets.values():
                self._set(r, "stopped")
        if self.client.is_connected():
            info = self.publish(time.monotonic(), "offline")
            t_end = time.monotonic() + 5.0
            while not info.is_published() and time.monotonic() < t_end:
                if self.client.loop(0.1) != mqtt.MQTT_ERR_SUCCESS:
                    break
            self.client.disconnect()
            self.client.loop(0.1)

    # ------------------------------------------------------------ from the broker
    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any = None) -> None:
        if getattr(rc, "is_failure", False):
            log.warning("fleet status: %s", link.refused(rc, self.broker)[1])
            return
        link.set_nodelay(client)
        self.backoff, self.problem = self.broker.reconnect_min, ""
        log.info("fleet status: connected to %s", redact(self.broker.url))
        with self.lock:
            topics = list(self.by_topic)
            self.dirty = True
        for t in topics:
            client.subscribe(t, qos=1)

    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        body = parse(bytes(msg.payload))
        with self.lock:
            asset = self.by_topic.get(msg.topic)
            r = self.assets.get(asset) if asset else None
            if r is None or r.state == "stopped":
                return
            if body is None:
                self.counts["messages_ignored"] += 1
            elif body["state"] == "online":
                self.witness.offer(r.name, body)  # confirmed (or not) by the store at the next tick
            elif self.wills and body["instance"] == r.instance:
                self._died(r, "restarting")
            else:
                self.counts["wills_ignored"] += 1

    def _birth(self, r: AssetStatus, f: dict[str, Any]) -> None:
        """A confirmed birth (:func:`.trust.trusted_birth`: its fields checked and bounded)."""
        if f["instance"] != r.instance:
            if r.instance is not None:
                if r.state == "running":  # no death seen (a lost node's orphan may never send its will)
                    r.restarts += 1
                r.last_restart = f["started_at"]
            r.gap_s, r.checkpoint_rejected = f["gap_s"], f["checkpoint_rejected"]
            r.instance, r.pid, r.node_id = f["instance"], f["pid"], f["node_id"]
        self._set(r, "running")

    def _died(self, r: AssetStatus, state: str) -> None:
        if r.state in ("running", "starting") and state == "restarting":
            r.restarts += 1
        self._set(r, state)

    def _set(self, r: AssetStatus, state: str) -> None:
        if r.state != state:
            r.state, r.since = state, time.time()
            self.dirty = True
            log.info("fleet status: %s %s", r.name, state)
