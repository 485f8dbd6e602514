"""Prometheus metrics and the /healthz, /readyz endpoints (one small threaded HTTP server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

HISTORY_FIGURES = ("written", "spooled", "replayed", "spool_pending", "errors", "lost", "duplicates", "lag_s",
                   "queue")


class Metrics:
    """Counters and gauges in a private registry (several services may share a process in tests)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.messages = Counter("twin_messages", "sensor messages received", ["result"], registry=r)
        self.invalid = Counter("twin_invalid_messages", "invalid sensor messages", ["reason"], registry=r)
        self.resyncs = Gauge("twin_resyncs", "re-synchronisations since start", registry=r)
        self.dropped = Gauge("twin_dropped_batches", "batches dropped by the overload policy", registry=r)
        self.lag = Gauge("twin_lag_seconds", "queue lag of the last batch (sequencer release to processing)",
                         registry=r)
        self.queue = Gauge("twin_queue_depth", "batches waiting for the solver", registry=r)
        self.hold = Gauge("twin_hold_samples", "samples per solver step (degradation level)", registry=r)
        self.step_ms = Gauge("twin_solver_ms_per_batch", "median solver wall time per batch [ms]", registry=r)
        self.connected = Gauge("twin_connected", "1 when connected to the broker", registry=r)
        self.reconnects = Gauge("twin_reconnects", "successful reconnects", registry=r)
        self.estimate = Gauge("twin_estimate", "the filter's estimate of an augmented unknown (its unit)", ["name"],
                              registry=r)
        self.estimate_sd = Gauge("twin_estimate_sd", "standard deviation of a filter state (its unit)", ["name"],
                                 registry=r)
        self.nis = Gauge("twin_nis", "normalised innovation squared of the last sample", registry=r)
        self.change_alarms = Counter("twin_change_alarms", "change alarms raised", ["statistic"], registry=r)
        self.history = Gauge("twin_history", "history store figures (docs/history.md): messages written, spooled, "
                             "replayed, spool_pending, errors, lost, duplicates; lag_s", ["figure"], registry=r)

    def history_figures(self, status: Mapping[str, Any]) -> None:
        """Export the history writer's counters (``sinks.history`` of the health message)."""
        for key in HISTORY_FIGURES:
            self.history.labels(key).set(float(status[key]))

    def batch_done(self, lag: float, depth: int, hold: int, resyncs: int, dropped: int) -> None:
        """The gauges after each batch: lag [s], queue depth, hold, re-initialisations, overload drops."""
        self.lag.set(lag)
        self.queue.set(depth)
        self.hold.set(hold)
        self.resyncs.set(resyncs)
        self.dropped.set(dropped)

    def filter(self, estimates: Mapping[str, float | None]) -> None:
        """Export the ``estimates`` of the latest sample (``nis``, ``<name>.sd``, augmented values)."""
        for key, value in estimates.items():
            if value is None:
                continue
            if key == "nis":
                self.nis.set(value)
            elif key.endswith(".sd"):
                self.estimate_sd.labels(key[:-3]).set(value)
            else:
                self.estimate.labels(key).set(value)


# A mounted route: request path (with query) → (status, content type, body, extra headers).
Route = Callable[[str], tuple[int, str, bytes, dict[str, str]]]
# A mounted POST route: (path, request headers with lower-case names, body) → the same.
PostRoute = Callable[[str, dict[str, str], bytes], tuple[int, str, bytes, dict[str, str]]]
MAX_POST_BYTES = 8192  # a larger request body is refused unread (413)
_REQUEST = threading.local()  # per HTTP thread: the address of the client whose request it serves


def request_client() -> str:
    """The address of the client whose request the calling HTTP thread serves ("" outside one)."""
    return str(getattr(_REQUEST, "client", ""))


def serve_http(host: str, port: int, metrics: Metrics, health: Callable[[], dict[str, Any]],
               ready: Callable[[], bool], routes: Mapping[str, Route] | None = None,
               post_routes: Mapping[str, PostRoute] | None = None) -> ThreadingHTTPServer:
    """Start the HTTP server in a daemon thread; ``server.server_address`` has the bound port.

    ``routes``: extra GET routes by path prefix (the longest matching prefix wins), mounted by
    extensions such as :mod:`mbsd_twin.dashboard`; /metrics, /healthz and /readyz come first.
    ``post_routes``: POST routes by exact path prefix the same way (bodies up to ``MAX_POST_BYTES``)."""
    extra: Mapping[str, Route] = routes if routes is not None else {}
    posts: Mapping[str, PostRoute] = post_routes if post_routes is not None else {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            _REQUEST.client = self.client_address[0]
            headers: dict[str, str] = {}
            if self.path.startswith("/metrics"):
                body, ctype, code = generate_latest(metrics.registry), CONTENT_TYPE_LATEST, 200
            elif self.path.startswith("/healthz"):
                body, ctype, code = json.dumps(health()).encode(), "application/json", 200
            elif self.path.startswith("/readyz"):
                ok = ready()
                body, ctype, code = (b"ready" if ok else b"not ready"), "text/plain", 200 if ok else 503
            else:
                body, ctype, code, headers = _extra_route(extra, self.path)
            self._answer(code, ctype, body, headers)

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            _REQUEST.client = self.client_address[0]
            length = self.headers.get("Content-Length") or "0"
            size = int(length) if length.isdigit() else -1
            if not 0 <= size <= MAX_POST_BYTES:
                self.close_connection = True
                self._answer(413, "text/plain", f"Content-Length {length[:20]!r}: a request body of 0 to "
                             f"{MAX_POST_BYTES} bytes is accepted".encode(), {})
                return
            data = self.rfile.read(size)
            head = {k.lower(): v for k, v in self.headers.items()}
            routes = {p: (lambda path, r=r: r(path, head, data)) for p, r in posts.items()}
            body, ctype, code, headers = _extra_route(routes, self.path)
            self._answer(code, ctype, body, headers)

        def _answer(self, code: int, ctype: str, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(code)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="twin-http", daemon=True).start()
    return server


def _extra_route(routes: Mapping[str, Route], path: str) -> tuple[bytes, str, int, dict[str, str]]:
    match = max((p for p in routes if path == p or path.startswith(p.rstrip("/") + "/")
                 or path.startswith(p + "?")), key=len, default=None)
    if match is None:
        return b"not found", "text/plain", 404, {}
    try:
        code, ctype, body, headers = routes[match](path)
    except Exception as exc:  # a faulty extension answers 500 instead of dropping the connection
        return f"internal error: {type(exc).__name__}".encode(), "text/plain", 500, {}
    return body, ctype, code, headers
