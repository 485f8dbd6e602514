"""The twin's ``starting`` status while it is built (issue #31 item 3).

Building a twin loads the engine's and the state estimator's compiled kernels from numba's disk
cache (about a second). On the first run after an install or upgrade nothing is cached and they
are compiled: a minute or two on a 2-core machine, during which the twin has no connection, so a
dashboard or an operator would see the previous run's ``offline`` (or nothing) and no reason.

``twin serve`` therefore asks :func:`kernels_to_compile` first; when something must be compiled it
builds the twin inside :class:`StartingStatus`, which connects a client of its own (the service's
broker settings, client id ``<service id>-starting``) and publishes on the twin's status topic,
retained, QoS 1::

    {"state": "starting", "reason": "compiling the engine's kernels and the state estimator's
     kernels into numba's disk cache (the first run after an install or upgrade: ...)",
     "since": <wall time>}

with the will ``{"state": "offline"}`` (a start that dies while compiling does not leave
``starting`` behind). At the end of the block the client disconnects cleanly; the service's own
birth (``online``) replaces the message when it connects. A block left by an exception publishes
``offline`` first. The broker being unreachable never delays or stops the start: the message is
queued, and dropped at the end of the block if it could not be sent.
"""

from __future__ import annotations

import contextlib
import time
from types import TracebackType
from typing import Any

from ..warmup import kernels_to_compile
from .config.sections import TwinConfig
from .link import make_client
from .protocol import Topics, encode

__all__ = ["StartingStatus", "compile_reason", "kernels_to_compile"]

SEND_WAIT = 2.0  # s: at the end of the block, at most this long for the status message to go out


def compile_reason(what: list[str]) -> str:
    return (f"compiling {' and '.join(what)} into numba's disk cache (the first run after an install or "
            "upgrade: a minute or two on a 2-core machine; later starts load them in about a second)")


class StartingStatus:
    """``with StartingStatus(cfg, reason): build the twin`` — see the module doc."""

    def __init__(self, cfg: TwinConfig, reason: str) -> None:
        self.topic = Topics(cfg.core.base).twin("status")
        self.reason = reason
        cid = f"{cfg.broker.client_id or f'mbsd-twin-{cfg.core.asset}'}-starting"
        self.client = make_client(cfg.broker, cid, (self.topic, encode({"state": "offline"})))
        self.broker = cfg.broker
        self.info: Any = None

    def __enter__(self) -> StartingStatus:
        self.client.connect_async(self.broker.host, self.broker.port, keepalive=self.broker.keepalive)
        self.client.loop_start()
        body = {"state": "starting", "reason": self.reason, "since": time.time()}
        self.info = self.client.publish(self.topic, encode(body), qos=1, retain=True)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # the status is a courtesy: it never fails (or delays by more than 2 × SEND_WAIT) the start
        with contextlib.suppress(Exception):
            self.info.wait_for_publish(SEND_WAIT)
        if kind is not None:
            with contextlib.suppress(Exception):
                self.client.publish(self.topic, encode({"state": "offline"}), qos=1,
                                    retain=True).wait_for_publish(SEND_WAIT)
        with contextlib.suppress(Exception):
            self.client.disconnect()
            self.client.loop_stop()
