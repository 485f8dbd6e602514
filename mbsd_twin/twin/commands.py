"""Command policy of the twin service (docs/mqtt-contract.md, "Commands"): which commands on
``{p}/{a}/twin/cmd/<name>`` run, where they are answered, and how many.

MQTT gives a subscriber no sender identity, so *who* may send a command is the broker's decision
(services/mosquitto.acl). What the twin itself enforces, per message, in this order:

1. a retained command is ignored (counted ``retained``): it would run again at every restart;
2. a token bucket (``[commands] rate`` per s, ``burst``) — a command beyond it is dropped without
   a reply (``rate_limited``), so a flood costs one counter increment per message;
3. the whole message (topic, body, response topic, correlation data) is at most ``max_bytes``;
   a larger one is refused without reading its body (``oversize``);
4. an MQTT 5 response topic is honoured only under ``{p}/{a}/twin/reply/``; any other is answered
   on ``twin/reply`` with a note (``reply_redirected``);
5. unknown commands (``unknown``), disabled ones (``disabled``) and unreadable bodies (``invalid``)
   are refused with a reply; the rest run (``run``).

Accepted and refused commands wait in a bounded queue (``queue_size``; beyond it the new one is
dropped, ``dropped``). The worker takes a command only when no sensor batch waits, or after at
least ``batches_per_command`` batches since the last command: commands never hold up more than a
bounded share of the sensor work.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from .protocol import Topics, encode, parse_command

if TYPE_CHECKING:
    import paho.mqtt.client as mqtt

    from .config.sections import CommandsConfig

log = logging.getLogger("mbsd_twin.twin")

MODEL_COMMANDS = ("reset", "set_param", "pause", "resume")  # change the model or stop it (run by TwinCore)
READ_ONLY = ("status",)  # answered by the service from its health; changes nothing
COMMANDS = READ_ONLY + MODEL_COMMANDS
MAX_ID = 128  # characters of a string "id" echoed in the reply; a longer one is not echoed
COUNTERS = ("received", "run", "retained", "rate_limited", "oversize", "reply_redirected", "unknown",
            "disabled", "invalid", "dropped")


@dataclass
class Pending:
    """A command admitted to the queue: to run (``reject`` None) or to answer with ``reject``."""

    name: str
    args: dict[str, Any] | None
    resp: str = ""  # response topic (only under twin/reply/); "" → twin/reply
    corr: bytes | None = None
    reject: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; :meth:`take` spends one when there is one."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, float(burst), clock
        self.tokens, self.t = float(burst), clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


def _clip(name: str, n: int = 64) -> str:
    return name if len(name) <= n else name[:n] + "…"


class CommandGate:
    """Admission (MQTT network thread: :meth:`admit`, :meth:`push` under the service lock),
    scheduling (worker: :meth:`next`, :meth:`batch_taken`) and replies (:meth:`reply`)."""

    def __init__(self, cfg: CommandsConfig, topics: Topics, source: str = "",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg, self.topics = cfg, topics
        self.where = f"[commands] enabled of {source or 'the service configuration'}"
        self.bucket = TokenBucket(cfg.rate, cfg.burst, clock)
        self.queue: deque[Pending] = deque()
        self.counts: Counter[str] = Counter({k: 0 for k in COUNTERS})
        self.since = cfg.batches_per_command  # sensor batches taken since the last command
        self.last_warning: dict[str, float] = {}

    # ---------------------------------------------------------- admission
    def admit(self, msg: mqtt.MQTTMessage) -> Pending | None:
        """The command in ``msg`` as a :class:`Pending` (to run or to refuse), or None when it is
        ignored without a reply (retained, rate-limited)."""
        self.counts["received"] += 1
        if msg.retain:
            self.counts["retained"] += 1
            self._warn("retained", "retained command on %s ignored (clear it: publish an empty retained "
                       "message to that topic)", _clip(msg.topic, 200))
            return None
        if not self.bucket.take():
            self.counts["rate_limited"] += 1
            self._warn("rate", "commands beyond [commands] rate = %g/s (burst %d) dropped", self.cfg.rate,
                       self.cfg.burst)
            return None
        name = msg.topic.rsplit("/", 1)[1]
        props = getattr(msg, "properties", None)
        resp = str(getattr(props, "ResponseTopic", "") or "")
        corr = getattr(props, "CorrelationData", None)
        size = len(msg.payload) + len(msg.topic.encode()) + len(resp.encode()) + len(corr or b"")
        if size > self.cfg.max_bytes:
            self.counts["oversize"] += 1
            return Pending(_clip(name), None, reject=self._refusal(
                _clip(name), f"command message of {size} bytes exceeds [commands] max_bytes = "
                f"{self.cfg.max_bytes}; rejected unread"))
        p = Pending(name, None, corr=corr)
        if resp and self.reply_topic_ok(resp):
            p.resp = resp
        elif resp:
            self.counts["reply_redirected"] += 1
            p.notes.append("response topic not under twin/reply/; answered on twin/reply")
        p.args, p.reject = self._check(name, bytes(msg.payload))
        return p

    def _check(self, name: str, body: bytes) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """(arguments, refusal): the body is read (its ``id`` echoed in a refusal too) but a refused
        command never runs."""
        args = parse_command(body)
        if name not in COMMANDS:
            self.counts["unknown"] += 1
            return args, self._refusal(_clip(name), f"unknown command {_clip(name)!r}; commands: "
                                       + ", ".join(COMMANDS))
        if name not in self.cfg.enabled:
            self.counts["disabled"] += 1
            return args, self._refusal(name, f"command {name!r} is disabled; enable it in {self.where}")
        if args is None:
            self.counts["invalid"] += 1
            return None, self._refusal(name, "the command body must be a JSON object")
        return args, None

    @staticmethod
    def _refusal(name: str, detail: str) -> dict[str, Any]:
        return {"cmd": name, "ok": False, "detail": detail}

    def reply_topic_ok(self, resp: str) -> bool:
        """An MQTT 5 response topic the twin answers on: ``twin/reply`` or below it, no wildcards."""
        base = self.topics.twin("reply")
        return (resp == base or resp.startswith(base + "/")) and "+" not in resp and "#" not in resp

    def push(self, p: Pending) -> bool:
        """Queue ``p`` (call under the service lock); False when the queue is full (dropped)."""
        if len(self.queue) >= self.cfg.queue_size:
            self.counts["dropped"] += 1
            self._warn("dropped", "command queue full ([commands] queue_size = %d); command dropped",
                       self.cfg.queue_size)
            return False
        self.queue.append(p)
        return True

    # --------------------------------------------------------- scheduling
    def next(self, batches_waiting: int) -> Pending | None:
        """The command to run now (call under the service lock): one is taken when no sensor batch
        waits, or when ``batches_per_command`` batches have been taken since the last command."""
        if not self.queue or (batches_waiting and self.since < self.cfg.batches_per_command):
            return None
        self.since = 0
        return self.queue.popleft()

    def batch_taken(self) -> None:
        self.since += 1

    # ------------------------------------------------------------- replies
    def reply(self, p: Pending, body: dict[str, Any], mqtt5: bool) -> tuple[str, str, Properties | None]:
        """(topic, payload, properties) of the reply to ``p``: ``body`` with the echoed ``id`` (a
        number, or a string of at most :data:`MAX_ID` characters) and any notes."""
        if p.reject is None:
            self.counts["run"] += 1
        reply = dict(body)
        notes = list(p.notes)
        if p.args and "id" in p.args:
            rid = p.args["id"]
            if isinstance(rid, str) and len(rid) <= MAX_ID or \
                    isinstance(rid, int | float) and not isinstance(rid, bool) and math.isfinite(rid):
                reply["id"] = rid
            else:
                notes.append(f"id not echoed: not a number or a string of at most {MAX_ID} characters")
        if notes:
            reply["note"] = "; ".join(notes)
        props = None
        if mqtt5 and p.corr is not None:
            props = Properties(PacketTypes.PUBLISH)
            props.CorrelationData = p.corr
        return p.resp or self.topics.twin("reply"), encode(reply), props

    def _warn(self, key: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self.last_warning.get(key, -1e18) >= 60.0:
            self.last_warning[key] = now
            log.warning(msg, *args)


def status_reply(health: dict[str, Any]) -> dict[str, Any]:
    """The read-only ``status`` command's reply: a summary of the health message."""
    keys = ("connected", "paused", "lag_s", "queue_depth", "hold")
    detail = "paused" if health.get("paused") else "running"
    return {"cmd": "status", "ok": True, "detail": detail, **{k: health.get(k) for k in keys}}
