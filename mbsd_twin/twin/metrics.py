"""Prometheus metrics and the /healthz, /readyz endpoints (one small threaded HTTP server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST


class Metrics:
    """Counters and gauges in a private registry (several services may share a process in tests)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.messages = Counter("twin_messages", "sensor messages received", ["result"], registry=r)
        self.invalid = Counter("twin_invalid_messages", "invalid sensor messages", ["reason"], registry=r)
        self.resyncs = Gauge("twin_resyncs", "re-synchronisations since start", registry=r)
        self.dropped = Gauge("twin_dropped_batches", "batches dropped by the overload policy", registry=r)
        self.lag = Gauge("twin_lag_seconds", "arrival-to-processing lag of the last batch", registry=r)
        self.queue = Gauge("twin_queue_depth", "batches waiting for the solver", registry=r)
        self.hold = Gauge("twin_hold_samples", "samples per solver step (degradation level)", registry=r)
        self.step_ms = Gauge("twin_solver_ms_per_batch", "median solver wall time per batch [ms]", registry=r)
        self.connected = Gauge("twin_connected", "1 when connected to the broker", registry=r)
        self.reconnects = Gauge("twin_reconnects", "successful reconnects", registry=r)


def serve_http(host: str, port: int, metrics: Metrics, health: Callable[[], dict[str, Any]],
               ready: Callable[[], bool]) -> ThreadingHTTPServer:
    """Start the HTTP server in a daemon thread; ``server.server_address`` has the bound port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            if self.path.startswith("/metrics"):
                body, ctype, code = generate_latest(metrics.registry), CONTENT_TYPE_LATEST, 200
            elif self.path.startswith("/healthz"):
                body, ctype, code = json.dumps(health()).encode(), "application/json", 200
            elif self.path.startswith("/readyz"):
                ok = ready()
                body, ctype, code = (b"ready" if ok else b"not ready"), "text/plain", 200 if ok else 503
            else:
                body, ctype, code = b"not found", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="twin-http", daemon=True).start()
    return server
