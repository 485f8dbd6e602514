"""The twin service: MQTT in, :class:`TwinCore` in a worker thread, MQTT out.

Threads: paho-mqtt's network loop (``loop_start``; it also reconnects, with backoff doubling from
``reconnect_min`` to ``reconnect_max``) validates and sequences sensor messages and queues them;
one worker thread runs the solver, answers commands and publishes. Every (re)connect
re-subscribes and re-publishes the retained birth (the will is registered once and
reused by paho on every reconnect; TCP_NODELAY is set as the socket opens, :func:`.link.make_client`).
With every health message the twin sends a pair of round-trip probes (:mod:`.probe`): the health
message warns when the broker's round trip suggests Nagle's algorithm.

Use as ``with TwinService(cfg) as svc: ...`` or ``async with TwinService(cfg) as svc: await
svc.wait()`` (start/stop run in a thread so the event loop is never blocked).

Overload (docs/mqtt-contract.md; :mod:`.ingest`): invalid messages are rejected in the network
thread before anything is queued, cheapest checks first; the bounded queue drops its oldest batch
when full. When the solver falls behind: (1) coarser solver steps — ``hold`` samples per step
through ``hold_levels`` while the queue lag (from the moment the sequencer released a batch to its
processing: a wait in the reorder buffer for a lost predecessor is not overload, it is reported as
``reorder_wait_s``) exceeds ``lag_high``, the queue is more than half full or a backlog was just
coalesced; (2) a backlog the worker cannot work off within
``max_lag`` (``flood_lag`` while batches arrive faster than it works them off) is coalesced: it
skips to the newest batch (the skipped ones counted as dropped); the
model predicts through the gap or re-initialises after more than ``[core] max_gap``. Memory is
bounded by the queue, the sequencer window and paho's outgoing queue (``max_queued_messages_set``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.properties import Properties

from ..model.loader import bundled_slider_crank, loads_mechanism
from ..storage.history.writer import HistoryWriter
from . import link
from .commands import CommandGate, Pending, status_reply
from .config.sections import TwinConfig
from .core import Out, TwinCore
from .eventlog import EventLog
from .health import health_message
from .ingest import RIG_RESTART, Intake, Item
from .mechanism_check import mechanism_file
from .metrics import Metrics, PostRoute, Route, serve_http
from .overload import Overload
from .probe import RoundTrip
from .protocol import Topics, encode, parse_command
from .ratelog import RateLimitedLog
from .recorder import FORMAT
from .redaction import redact
from .sinks import RecordingSink
from .worker_guard import WorkerWatch, health_tick, internal_error, run_worker

log = logging.getLogger("mbsd_twin.twin")


RIG_STATES = ("online", "offline", "unknown")  # rig status states counted by name; any other is "other"


class TwinService:
    def __init__(self, cfg: TwinConfig) -> None:
        self.cfg = cfg
        self.topics = Topics(cfg.core.base)
        self.mech_path = mechanism_file(cfg, str(bundled_slider_crank()))  # ConfigError naming key and path
        with open(self.mech_path, encoding="utf-8") as fh:
            self.mech_text = fh.read()
        self.mech = loads_mechanism(self.mech_text, source=self.mech_path)
        self.rlog = RateLimitedLog()
        # alarms, re-initialisations, holds (from the start level's) … at INFO
        self.events = EventLog(self.topics.twin("alarms"), start_hold=cfg.service.hold_levels[cfg.service.start_level])
        self.recorder = self._recording() if cfg.record.path else None
        self.history = self._history() if cfg.history.enabled else None
        self.core = TwinCore(cfg.core, self.mech, self.recorder)
        if self.core.read.unbounded:
            log.warning("%s", self.core.read.warning())
        self.metrics = Metrics()
        self.lock = threading.Condition()
        self.commands = CommandGate(cfg.commands, self.topics, cfg.source)  # policy: commands.py
        self.counts: Counter[str] = Counter()
        self.invalid: Counter[str] = Counter()
        self.intake = Intake(cfg.service, cfg.core.asset, self.lock, self.counts, self.invalid, self.metrics,
                             self.rlog)
        self.seq, self.batches = self.intake.seq, self.intake.batches
        self.overload = Overload(cfg.service, self.counts)  # the solver hold under load: overload.py
        self.lag = 0.0
        self.latency_ms: deque[float] = deque(maxlen=1000)
        self.connected = threading.Event()
        self.connects = 0
        self.outages: list[float] = []
        self.last_error = ""  # why the last connection attempt failed (no secrets)
        self.t_disconnect: float | None = None
        self.rig_session: Any = None
        self.stopping = threading.Event()
        self.instance = uuid.uuid4().hex[:8]
        self.rtt = RoundTrip(cfg.service.rtt_warn_ms)  # broker round trip of probe pairs (probe.py)
        self.client = self._make_client()
        self.worker = threading.Thread(target=run_worker, args=(self,), name="twin-worker", daemon=True)
        # a worker thread that dies all the same (worker_guard.py): on_worker_death, by default a stop;
        # ``worker_died`` says why (``twin serve`` then exits non-zero, a fleet twin's process at once)
        self.on_worker_death: Callable[[str], None] = lambda reason: self.stopping.set()
        self.watch = WorkerWatch(self.worker, self.stopping, lambda reason: self.on_worker_death(reason))
        self.http: Any = None
        # --- extension hook (mbsd_twin.dashboard): taps see every published message (worker thread);
        # http_routes / http_post_routes are extra GET / POST routes of the HTTP server. The dashboard
        # mounts itself when the HTTP server is on (cfg.metrics.port).
        self.taps: list[Callable[[Out], None]] = []
        self.http_routes: dict[str, Route] = {}
        self.http_post_routes: dict[str, PostRoute] = {}
        self.dashboard: Any = None
        if self.history is not None:
            self.taps.append(self.history.tap)
        # --- extension hook (mbsd_twin.fleet.member): ticks run in the worker thread between batches
        # (the core is consistent there: checkpoints); birth_extra is merged into the retained birth.
        self.ticks: list[Callable[[float], None]] = []
        self.birth_extra: dict[str, Any] = {}
        # on_own_status (set by fleet/member.py) sees every non-retained message on the twin's own status
        # topic: hints of other instances of the asset (fleet/fence.py); ``supersede`` stops publishing.
        self.on_own_status: Callable[[dict[str, Any], bool], None] | None = None
        self.superseded = ""  # why this instance stopped publishing ("": it has not)
        self.t_started = time.monotonic()
        if cfg.metrics.port:
            from ..dashboard import mount

            self.dashboard = mount(self)

    def _recording(self) -> RecordingSink:
        """The recording sink: a write failure suspends it (counted, in health), never the twin."""
        r = self.cfg.record
        header = {"k": "header", "format": FORMAT, "core": self.cfg.core.to_dict(),
                  "mechanism": self.mech_path, "mechanism_toml": self.mech_text}
        return RecordingSink(r.path, r.max_bytes, r.keep, header, r.retry_min, r.retry_max,
                             lambda event, msg: self.rlog.warning(f"recording {event}", "%s", msg, level=logging.ERROR))

    def _history(self) -> HistoryWriter:
        """The history writer: its own thread; a store outage spools to disk, never stops the twin."""
        return HistoryWriter(self.cfg.history,
                             lambda event, msg: self.rlog.warning(f"history {event}", "%s", msg, level=logging.ERROR))

    # --------------------------------------------------------------- client
    def _make_client(self) -> mqtt.Client:
        cid = self.cfg.broker.client_id or f"mbsd-twin-{self.cfg.core.asset}-{self.instance}"
        will = (self.topics.twin("status"), encode({"state": "offline", "instance": self.instance}))
        c = link.make_client(self.cfg.broker, cid, will)
        c.on_connect, c.on_disconnect, c.on_message = self._on_connect, self._on_disconnect, self._on_message
        c.on_connect_fail = self._on_connect_fail
        c.on_publish = self.rtt.acked
        return c

    def _birth(self) -> str:
        return encode({"state": "online", "instance": self.instance, "session": self.connects,
                       "model": self.mech.name, "config_hash": self.cfg.config_hash(), **self.birth_extra})

    def _on_connect(self, client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any = None) -> None:
        if rc.is_failure:
            self._connect_problem(*link.refused(rc, self.cfg.broker))
            return
        self.connects += 1
        if self.t_disconnect is not None:
            self.outages.append(time.monotonic() - self.t_disconnect)
            self.t_disconnect = None
        subs = [self.topics.sensors, self.topics.rig_status, self.topics.cmd_filter]
        subs += [self.topics.twin("status")] if self.on_own_status else []
        if self.cfg.broker.protocol == 5:  # commands retain-as-published: a retained one is ignored (commands.py)
            client.subscribe([(t, mqtt.SubscribeOptions(qos=1, retainAsPublished=t == subs[2])) for t in subs])
        else:
            client.subscribe([(t, 1) for t in subs])
        client.publish(self.topics.twin("status"), self._birth(), qos=1, retain=True)
        self.connected.set()
        self.metrics.connected.set(1)
        self.metrics.reconnects.set(self.connects - 1)
        log.info("connected to %s (session %d)", redact(self.cfg.broker.url), self.connects)

    def _on_disconnect(self, client: mqtt.Client, userdata: Any, flags: Any, rc: Any, props: Any = None) -> None:
        was = self.connected.is_set()
        if was:
            self.t_disconnect = time.monotonic()
        self.connected.clear()
        self.metrics.connected.set(0)
        if was and not self.stopping.is_set() and not self.superseded:
            log.warning("disconnected from the broker (%s); reconnecting", rc)

    def _on_connect_fail(self, client: mqtt.Client, userdata: Any) -> None:
        # paho calls this inside its ``except OSError`` block: the exception says why (TCP, TLS)
        self._connect_problem(*link.failed(sys.exc_info()[1], self.cfg.broker))

    def _connect_problem(self, kind: str, msg: str) -> None:
        self.counts[kind] += 1
        self.last_error = msg
        self.rlog.warning(kind, "%s", msg, level=logging.ERROR)

    # -------------------------------------------------------------- ingress
    def _on_message(self, client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        try:
            if msg.topic == self.topics.sensors:
                self.intake.ingest(bytes(msg.payload), time.monotonic())
            elif msg.topic == self.topics.rig_status:
                self._rig_status(bytes(msg.payload))
            elif msg.topic.startswith(self.topics.twin("cmd/")):
                self._command_in(msg)
            elif msg.topic == self.topics.twin("status") and self.on_own_status:
                st = parse_command(bytes(msg.payload))
                if st:
                    self.on_own_status(st, bool(msg.retain))  # retained: an old birth, or anyone's
        except Exception:  # never let one message stop the network thread
            self.rlog.warning("message error", "unexpected error handling a message on %s", msg.topic,
                              level=logging.ERROR, exc_info=True)
            self.counts["internal_error"] += 1

    def _rig_status(self, payload: bytes) -> None:
        st = parse_command(payload) or {"state": payload.decode("utf-8", "replace").strip()}
        if st.get("state") == "online":
            session = st.get("session")
            if self.rig_session is not None and session != self.rig_session:
                self.intake.restart(time.monotonic())
            self.rig_session = session
        state = st.get("state", "unknown")
        self.counts[f"rig_{state if state in RIG_STATES else 'other'}"] += 1  # bounded: no key per string

    def _command_in(self, msg: mqtt.MQTTMessage) -> None:
        pending = self.commands.admit(msg)  # None: ignored (retained, rate-limited), counted
        if pending is not None:
            with self.lock:
                if self.commands.push(pending):
                    self.lock.notify()

    # --------------------------------------------------------------- worker
    def _work_once(self, next_health: float) -> float:
        """One turn of the worker loop (:func:`.worker_guard.run_worker`): a command or a batch, the
        ticks, the health message when due; the next health time."""
        with self.lock:
            if not self.batches and not self.commands.queue:
                self.lock.wait(0.05)
            now = time.monotonic()
            self.intake.flush(now)
            cmd = self.commands.next(len(self.batches))  # bounded share: commands.py
            item = self.intake.take(now) if cmd is None else None
            if item is not None:
                self.commands.batch_taken()
            depth = len(self.batches)
        try:
            if cmd is not None:
                self._run_command(cmd)
            if item is not None:
                self._process(item, depth)
        except Exception:
            internal_error(self, "worker error", "unexpected error in the twin worker")
        for tick in self.ticks:
            try:
                tick(time.monotonic())
            except Exception:
                internal_error(self, "tick error", "a worker tick failed")
        if time.monotonic() >= next_health:
            next_health = time.monotonic() + self.cfg.service.health_interval
            health_tick(self)
        return next_health

    def _process(self, item: Item, depth: int) -> None:
        batch, t_arrival = item.batch, item.arrival
        if batch is RIG_RESTART:
            self.core.rig_restart()
            self.events.rig_restarted()
            return
        t_start = time.monotonic()
        self.lag = t_start - item.ready  # the twin's own backlog: a wait in the reorder buffer is not overload
        st = self.core.stats
        before = (st["invalid"]["range"], st["recovered"]["step"], st["recovered"]["work"])
        hold = self.overload.hold(self.lag, depth, self.intake.shed)
        self.events.hold_changed(hold, self.lag, depth, self.intake.shed)
        outs = self.core.step(batch, hold)
        self.events.resynced(self.core.batch_resync_events)
        if st["invalid"]["range"] > before[0]:
            self.metrics.invalid.labels("range").inc()
            self.rlog.warning("range", "invalid sensor message (range): %s", self.core.last_problem)
        if st["recovered"]["step"] > before[1]:
            self.rlog.warning("recovered", "model restored after a failure: %s", self.core.last_problem)
        if st["recovered"]["work"] > before[2]:
            self.rlog.warning("work", "batch seq %d rejected: %s", batch.seq, self.core.last_problem)
        for o in outs:
            self.publish(o)
        for alarm in self.events.outputs(outs):  # logged at INFO
            if alarm.get("source") == "change" and alarm.get("event") == "raised":
                self.metrics.change_alarms.labels(alarm["channel"]).inc()
        if outs:
            self.metrics.filter(self.core.latest.get("estimates", {}))
            self.latency_ms.append(1e3 * (time.monotonic() - t_arrival))
        if self.recorder:
            self.recorder.flush()
        self.metrics.batch_done(self.lag, depth, hold, sum(st["resync"].values()), self.counts["dropped_overload"])
        self.intake.cost(time.monotonic() - t_start)

    def _run_command(self, p: Pending) -> None:
        if p.reject is not None:
            reply = p.reject
        elif p.name == "status":
            reply = status_reply(self.health())
        else:
            reply = self.core.command(p.name, p.args or {})
        topic, payload, props = self.commands.reply(p, reply, self.cfg.broker.protocol == 5)
        self.publish(Out(topic, payload, qos=1), props)

    def supersede(self, reason: str) -> None:
        """Fence this instance off for good (a newer one holds the asset's lease, fleet/fence.py): no
        input, output or history; a clean disconnect (no ``offline`` will over the newer birth)."""
        if self.superseded:
            return
        self.superseded = reason
        self.counts["superseded"] = 1
        log.error("superseded, this instance stops publishing: %s", reason)
        self.client.unsubscribe(self.topics.sensors)
        self.client.will_clear()  # a reconnection racing the stop (seen under load) must carry no will either
        self.client.disconnect()

    def publish(self, out: Out, props: Properties | None = None) -> None:
        if self.superseded:
            return
        if not self.topics.owns(out.topic):  # the service only publishes under its own prefix
            raise ValueError(f"refusing to publish outside {self.topics.twin('')}: {out.topic}")
        try:
            info = self.client.publish(out.topic, out.payload, qos=out.qos, retain=out.retain, properties=props)
            failed = info.rc != mqtt.MQTT_ERR_SUCCESS
        except Exception as exc:  # e.g. a payload the client refuses: this message is lost, not the worker
            self.rlog.warning("publish error", "publishing on %s failed: %r", out.topic, exc, level=logging.ERROR)
            failed = True
        for tap in self.taps:
            try:
                tap(out)
            except Exception as exc:
                self.rlog.warning("tap", "a message tap failed: %r", exc)
        if failed:
            self.counts["publish_failed"] += 1

    # --------------------------------------------------------------- health
    def health(self) -> dict[str, Any]:
        return health_message(self)  # health.py

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        b = self.cfg.broker
        if self.cfg.metrics.port:
            self.http = serve_http(self.cfg.metrics.host, self.cfg.metrics.port, self.metrics, self.health,
                                   lambda: self.connected.is_set() and not self.stopping.is_set(),
                                   self.http_routes, self.http_post_routes)
        self.client.connect_async(b.host, b.port, keepalive=b.keepalive)
        self.client.loop_start()
        if self.history is not None:
            self.history.start()
        self.worker.start()
        self.watch.start()

    @property
    def worker_died(self) -> str:
        return self.watch.died

    def stop(self, timeout: float = 3.0) -> None:
        """Graceful: publish ``offline`` (retained), flush, disconnect."""
        self.stopping.set()
        self.worker.join(timeout)
        st = self.core.stats
        self.events.stopped(st["batches"], st["samples"], self.counts["dropped_overload"])
        if self.connected.is_set() and not self.superseded:
            info = self.client.publish(self.topics.twin("status"),
                                       encode({"state": "offline", "instance": self.instance}), qos=1, retain=True)
            info.wait_for_publish(timeout)
        self.client.disconnect()
        self.client.loop_stop()
        if self.recorder:
            self.recorder.close()
        if self.history is not None:  # within the watchdog's grace (SIGKILL after stop_grace)
            grace = self.cfg.service.stop_grace
            self.history.close(max(0.5, grace - timeout) if grace > 0 else 10.0)
        if self.http:
            self.http.shutdown()

    def __enter__(self) -> TwinService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> TwinService:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.stop)

    async def wait(self) -> None:
        """Until ``stop`` is called (e.g. from a SIGTERM handler)."""
        while not self.stopping.is_set():
            await asyncio.sleep(0.2)
