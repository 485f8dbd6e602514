"""The broker round trip of the twin's own publishes, and the Nagle warning of the health message.

With every health message the twin publishes a back-to-back pair of small QoS 1 probes on
``{p}/{a}/twin/probe`` and measures the time from the pair's publish to the broker's PUBACK of its
second probe — the packet a broker with Nagle's algorithm on holds back until the first one is
acknowledged. The figures (``health.broker_rtt_ms``) are over the last ``PAIRS`` pairs; when their
75th percentile exceeds ``[service] rtt_warn_ms`` (after at least ``MIN_PAIRS`` pairs) while the twin is not
overloaded (finest hold, no queue, lag below ``lag_low``: its own threads answer at once), the
health message carries a warning naming the figure and the fix (``set_tcp_nodelay true`` in
mosquitto.conf).

Why a pair: the broker holds the second PUBACK back until its first is acknowledged, and the
twin's kernel delays that acknowledgement (it has nothing to send with it; about 40 ms on Linux).
Measured on loopback (mosquitto 2.0.11, tests/test_twin_link.py, 4 runs): median 41-42 ms with
mosquitto's default against 0.25-0.54 ms with ``set_tcp_nodelay true``. A single QoS 1 publish
amid the twin's outputs shows no difference (the outputs carry the acknowledgements). The warning
also fires for any path that is slow as a rule (a distant broker): the figure says how slow. The
twin sets TCP_NODELAY on its own socket (:func:`.link.make_client`); the broker's side is the
broker's setting.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt

from .protocol import encode

PAIRS = 30  # probe pairs the figures are taken over (30 s at the default health_interval)
MIN_PAIRS = 10  # pairs before a warning is given
STALE = 60.0  # s: a probe not acknowledged this long is forgotten (a lost connection)


class RoundTrip:
    """Probe pairs and their round trips; ``acked`` is paho's ``on_publish`` (network thread),
    ``send`` runs in the worker."""

    def __init__(self, warn_ms: float) -> None:
        self.warn_ms = warn_ms
        self.rtt_ms: deque[float] = deque(maxlen=PAIRS)
        self.pending: dict[int, float] = {}  # mid of a pair's second probe → when the pair was sent
        self.early: dict[int, float] = {}  # PUBACKs seen before ``send`` recorded their mid
        self.lock = threading.Lock()
        self.pairs = 0

    def send(self, client: mqtt.Client, topic: str) -> None:
        """Publish a pair of QoS 1 probes back to back; the second one's PUBACK ends the round trip."""
        t = time.monotonic()
        self.pairs += 1
        client.publish(topic, encode({"probe": self.pairs, "part": 1}), qos=1)
        info = client.publish(topic, encode({"probe": self.pairs, "part": 2}), qos=1)
        if info.rc != mqtt.MQTT_ERR_SUCCESS:
            return
        with self.lock:
            t_ack = self.early.pop(info.mid, None)
            if t_ack is not None:
                self.rtt_ms.append(1e3 * (t_ack - t))
            else:
                self.pending[info.mid] = t
            for mid in [m for m, ts in self.pending.items() if ts < t - STALE]:
                del self.pending[mid]
            self.early.clear()

    def acked(self, client: Any, userdata: Any, mid: int, reason: Any = None, props: Any = None) -> None:
        """paho's ``on_publish`` (QoS 1: the PUBACK arrived)."""
        t = time.monotonic()
        with self.lock:
            t_sent = self.pending.pop(mid, None)
            if t_sent is not None:
                self.rtt_ms.append(1e3 * (t - t_sent))
            elif len(self.early) < 100:
                self.early[mid] = t

    def figures(self) -> dict[str, float]:
        """ms over the last pairs: p50, p99, max, and n (0: none acknowledged yet)."""
        with self.lock:
            r = np.array(self.rtt_ms or [0.0])
            n = len(self.rtt_ms)
        return {"p50": float(np.percentile(r, 50)), "p99": float(np.percentile(r, 99)), "max": float(r.max()),
                "n": n}

    def warning(self, overloaded: bool) -> str | None:
        """The Nagle warning, or None (too few pairs, fast enough, overloaded, or ``warn_ms`` 0)."""
        f = self.figures()
        with self.lock:
            p75 = float(np.percentile(self.rtt_ms, 75)) if self.rtt_ms else 0.0
        # a quarter of the pairs held back: a busy twin often has data of its own to send, which
        # carries the acknowledgement at once, so with Nagle only some pairs wait (p50 14.6 ms,
        # p99 45 ms on a slow 2-core machine streaming 1 kHz)
        if self.warn_ms <= 0 or overloaded or f["n"] < MIN_PAIRS or p75 <= self.warn_ms:
            return None
        return (f"broker round trip {p75:.1f} ms (75th percentile of the last {f['n']} probe pairs; "
                f"[service] rtt_warn_ms = {self.warn_ms:g}) while the twin is not overloaded: the broker "
                "probably holds small messages back (Nagle's algorithm); set `set_tcp_nodelay true` in "
                "mosquitto.conf (docs/service-config.md, Latency)")
