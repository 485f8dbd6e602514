"""The demo's synthetic rig: :mod:`mbsd_twin.twin.rig` (hidden parameter mismatch, sensor noise,
injected faults) streamed in real time from a thread that stops on request.

The rig's trajectory here is integrated with the engine's compiled DOP853 path (the rig module's
default RK45 runs slower than real time on a small machine); the signals, noise and fault plan are
those of :mod:`mbsd_twin.twin.rig`.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from ..dynamics import SolverOptions
from ..model import Mechanism
from ..ports import apply_parameters
from ..simulator import Simulator
from ..twin.config import BrokerConfig
from ..twin.protocol import Topics, encode
from ..twin.rig import MessageSource, RigConfig, Trajectory, expected_counts, payload, plan_faults, schedule


def connect(url: str, client_id: str, protocol: int, will: tuple[str, str]) -> Any:
    """A connected paho client (MQTT 5 or 3.1.1) with its loop running; raises after 10 s."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    b = BrokerConfig(url=url)
    c = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                    protocol=mqtt.MQTTv5 if protocol == 5 else mqtt.MQTTv311)
    c.will_set(will[0], will[1], qos=1, retain=True)
    c.connect(b.host, b.port, keepalive=30)
    c.loop_start()
    t_end = time.monotonic() + 10
    while not c.is_connected():
        if time.monotonic() > t_end:
            c.loop_stop()
            raise ConnectionError(f"the rig could not connect to {url}")
        time.sleep(0.01)
    return c


class FastTrajectory(Trajectory):
    """:class:`Trajectory` with the default (compiled when possible) DOP853 integrator."""

    def __init__(self, mech: Mechanism, cfg: RigConfig) -> None:
        super().__init__(mech, cfg)
        hidden = apply_parameters(mech, cfg.mismatch) if cfg.mismatch else mech
        self.sim = Simulator(hidden, SolverOptions(method="DOP853", rtol=1e-8, atol=1e-10))
        self.knots = [self._knot(0.0)]


class RigThread(threading.Thread):
    """Streams ``duration`` s of sensor messages (with faults at ``fault_rate`` per message) to
    ``url``; ``stop()`` ends it early. ``manifest`` is the injected-fault manifest after ``join``."""

    def __init__(self, mech: Mechanism, cfg: RigConfig, url: str, duration: float, fault_rate: float,
                 window: int = 5, protocol: int = 4) -> None:
        super().__init__(name="demo-rig", daemon=True)
        self.cfg, self.url, self.duration, self.fault_rate, self.window = cfg, url, duration, fault_rate, window
        self.protocol = protocol
        self.traj = FastTrajectory(mech, cfg)
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
        plan = plan_faults(n_msg, self.fault_rate, self.window, c.seed) if self.fault_rate > 0 else {}
        order = schedule(n_msg, plan, self.window)
        offline = encode({"state": "offline", "session": self.session})
        cl = connect(self.url, f"demo-rig-{self.session}", self.protocol, (self.topics.rig_status, offline))
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
