"""The demo's synthetic rig: :mod:`mbsd_twin.twin.rig` (hidden parameter mismatch, sensor noise,
injected faults) streamed in real time from a thread that stops on request."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from ..model.model import Mechanism
from ..twin.protocol import Topics, encode
from ..twin.rig import MessageSource, RigConfig, Trajectory, expected_counts, payload, schedule
from ..twin.rig_client import connect
from ..twin.rig_messages import message_plan


class RigThread(threading.Thread):
    """Streams ``duration`` s of sensor messages (with faults at ``fault_rate`` per message) to
    ``url``; ``stop()`` ends it early. ``manifest`` is the injected-fault manifest after ``join``."""

    def __init__(self, mech: Mechanism, cfg: RigConfig, url: str, duration: float, fault_rate: float,
                 window: int = 5, protocol: int = 4) -> None:
        super().__init__(name="demo-rig", daemon=True)
        self.cfg, self.url, self.duration, self.fault_rate, self.window = cfg, url, duration, fault_rate, window
        self.protocol = protocol
        self.traj = Trajectory(mech, cfg)
        self.topics = Topics(f"{cfg.prefix}/{cfg.asset}")
        self.session = uuid.uuid4().hex[:8]
        self.stopping = threading.Event()
        self.sent = 0
        self.manifest: dict[str, Any] = {}
        self.error: BaseException | None = None

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            self._stream()
        except BaseException as exc:  # reported by the demo; a thread must not die silently
            self.error = exc

    def _stream(self) -> None:
        c = self.cfg
        n_msg = int(self.duration * c.rate / c.batch)
        plan = message_plan(c, n_msg, self.fault_rate, self.window)
        order = schedule(n_msg, plan, self.window)
        offline = encode({"state": "offline", "session": self.session})
        cl = connect(self.url, f"demo-rig-{self.session}", will=(self.topics.rig_status, offline),
                     protocol=self.protocol)
        try:
            cl.publish(self.topics.rig_status, encode({"state": "online", "session": self.session}), qos=1,
                       retain=True)
            src, cache = MessageSource(self.traj, time.time()), {}  # type: ignore[var-annotated]
            period, t_start = c.batch / c.rate, time.monotonic()
            for k, (i, how) in enumerate(order):
                if self.stopping.is_set():
                    break
                body = payload(src, i, how, cache)
                wait = t_start + (min(k, i) + 1) * period - time.monotonic()
                if wait > 0 and self.stopping.wait(wait):
                    break
                cl.publish(self.topics.sensors, body, qos=0)
                self.sent += 1
            last = max((i for i, _ in order[:self.sent]), default=-1)
            done = {i: kind for i, kind in plan.items() if i <= last}
            self.manifest = {"asset": c.asset, "session": self.session, "messages": last + 1, "sent": self.sent,
                             "seed": c.seed, "fault_rate": self.fault_rate,
                             "faults": {str(i): kind for i, kind in sorted(done.items())},
                             "expected": expected_counts(done), "noise": c.noise, "mismatch": c.mismatch}
            cl.publish(self.topics.rig_status, offline, qos=1, retain=True).wait_for_publish(2)
        finally:
            cl.disconnect()
            cl.loop_stop()
