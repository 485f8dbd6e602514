"""Simulated rigs for a fleet (tests and benchmarks/bench_fleet.py): one precomputed slider-crank
stream (:func:`.rig.stream`) published in real time for several assets from one thread, each with
its own seq and rig time, looping over the stream (seq and rig time keep counting up). Every
message is stamped with its send time in ``sent_at`` (asset → seq → monotonic s) for latency
measurements."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from ..model.model import Mechanism
from ..rig.client import connect
from ..rig.synthetic import RigConfig, stream
from ..twin.protocol import Topics, encode


class FleetFeeder:
    def __init__(self, mech: Mechanism, url: str, assets: list[str], rate: float = 1000.0, batch: int = 20,
                 duration: float = 10.0, prefix: str = "dt/v1", msgs: list[dict[str, Any]] | None = None,
                 auth: tuple[str, str] | None = None) -> None:
        self.cfg = RigConfig(rate=rate, batch=batch)
        self.msgs = msgs or stream(mech, self.cfg, duration)  # ``msgs``: a stream computed before
        self.url, self.prefix = url, prefix
        self.assets = list(assets)
        self.period = batch / rate
        self.sent_at: dict[str, dict[int, float]] = {a: {} for a in assets}
        self.stopping = threading.Event()
        self.client = connect(url, f"fleet-feeder-{id(self):x}", auth=auth)
        self.thread = threading.Thread(target=self._run, name="fleet-feeder", daemon=True)
        self.lock = threading.Lock()

    def set_assets(self, assets: list[str]) -> None:
        with self.lock:
            self.assets = list(assets)
            for a in assets:
                self.sent_at.setdefault(a, {})

    def _publish(self, i: int, t_epoch: float) -> None:
        m = self.msgs[i % len(self.msgs)]
        with self.lock:
            assets = list(self.assets)
        for a in assets:
            body: dict[str, Any] = {**m, "asset": a, "seq": i, "t0": t_epoch + i * self.period}
            self.sent_at[a][i] = time.monotonic()
            self.client.publish(Topics(f"{self.prefix}/{a}").sensors, encode(body), qos=0)

    def _run(self) -> None:
        for a in self.assets:
            self.client.publish(Topics(f"{self.prefix}/{a}").rig_status,
                                json.dumps({"state": "online", "session": "feeder"}), qos=1, retain=True)
        t0 = time.monotonic()
        i = 0
        while not self.stopping.is_set():
            self._publish(i, 0.0)
            i += 1
            delay = t0 + i * self.period - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    def start(self) -> FleetFeeder:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)
        self.client.loop_stop()
        self.client.disconnect()
