"""The demo's synthetic rig: :mod:`mbsd_twin.rig.synthetic` (hidden parameter mismatch, sensor noise,
injected faults) streamed in real time from a thread that stops on request."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from ..model.model import Mechanism
from ..rig.client import connect
from ..rig.messages import expected_counts, message_plan, payload, schedule
from ..rig.synthetic import MessageSource, RigConfig, Trajectory, fault_manifest
from ..simulation.ports import model_parameters
from ..twin.protocol import Topics, encode


class RigThread(threading.Thread):
    """Streams ``duration`` s of sensor messages (with faults at ``fault_rate`` per message) to
    ``url``; ``stop()`` ends it early. ``manifest`` is the injected-fault manifest after ``join``: the
    message faults by index (``faults``; message i has seq ``seq0`` + i), the rig faults
    (``rig_faults``, :func:`~mbsd_twin.rig.synthetic.fault_manifest`), the stream's ``epoch`` (rig time 0
    on the twin's clock), ``rate`` and ``batch``."""

    def __init__(self, mech: Mechanism, cfg: RigConfig, url: str, duration: float, fault_rate: float,
                 window: int = 5, protocol: int = 4) -> None:
        super().__init__(name="demo-rig", daemon=True)
        self.cfg, self.url, self.duration, self.fault_rate, self.window = cfg, url, duration, fault_rate, window
        self.protocol = protocol
        self.mech = mech
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
                             "seed": c.seed, "fault_rate": self.fault_rate, "epoch": src.epoch, "seq0": src.seq0,
                             "rate": c.rate, "batch": c.batch,
                             "faults": {str(i): kind for i, kind in sorted(done.items())},
                             "expected": expected_counts(done), "noise": c.noise, "mismatch": c.mismatch,
                             "rig_faults": [f for f in fault_manifest(c) if f["sample"] < (last + 1) * c.batch]}
            cl.publish(self.topics.rig_status, offline, qos=1, retain=True).wait_for_publish(2)
        finally:
            cl.disconnect()
            cl.loop_stop()

    def truth(self, names: Sequence[str]) -> dict[str, dict[str, float]]:
        """The rig's hidden value (``hidden``) and the model's (``model``) of each name at the last
        sample streamed: a model parameter (with the mismatch and the mass faults in effect), or
        ``<input port>.bias`` (the input_bias faults in effect on that port; 0 without). Names that
        are neither are left out."""
        c = self.cfg
        k_last = max(0, int(self.manifest.get("messages", 0)) * c.batch - 1)
        hidden, params = self.traj.parameters(k_last / c.rate), model_parameters(self.mech)
        out = {}
        for name in names:
            port = name.removesuffix(".bias")
            if name in params:
                out[name] = {"hidden": hidden.get(name, params[name][0].value), "model": params[name][0].value}
            elif port != name and port in self.mech.input_names:
                bias = sum(f.size for f in c.faults if f.kind == "input_bias" and f.target == port
                           and f.sample(c.rate) <= k_last)
                out[name] = {"hidden": bias, "model": 0.0}
        return out
