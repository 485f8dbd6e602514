"""Validation of a loaded service configuration: each check appends every problem it finds, named by
its section and key (docs/service-config.md), to one list that :func:`.file.load_config` raises
as a single :class:`.sections.ConfigError`."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from ..redaction import redact, url_password_problem

if TYPE_CHECKING:
    from .sections import (
        BrokerConfig,
        CommandsConfig,
        CoreConfig,
        DashboardConfig,
        HistoryConfig,
        MetricsConfig,
        ServiceConfig,
    )


def shown(value: Any) -> str:
    """A value for an error message (URLs without their user-info part)."""
    return repr(redact_url(value)) if isinstance(value, str) else repr(value)[:80]


def redact_url(url: str) -> str:
    """``url`` without a password (``mqtt://user:***@host:port``, ``?password=***``) — safe for
    messages and logs (:func:`..redaction.redact`)."""
    return redact(url, url)


def check_broker(b: BrokerConfig, problems: list[str]) -> None:
    u = urlparse(b.url)
    if u.scheme not in ("mqtt", "mqtts") or not u.hostname:
        problems.append(f"[broker] url must be mqtt://host:port or mqtts://host:port, got {shown(b.url)}")
    elif u.username is not None or u.password is not None or url_password_problem("", b.url, ""):
        problems.append(f"[broker] url must not carry credentials ({shown(b.url)}); use username and "
                        "MBSD_TWIN_PASSWORD")
    else:
        try:
            u.port  # noqa: B018 - raises ValueError when out of range
        except ValueError:
            problems.append(f"[broker] url has an invalid port: {shown(b.url)}")
    if b.protocol not in (4, 5):
        problems.append(f"[broker] protocol must be 4 (MQTT 3.1.1) or 5, got {b.protocol}")
    if not 0 < b.reconnect_min <= b.reconnect_max:
        problems.append("[broker] need 0 < reconnect_min <= reconnect_max")
    if b.keepalive < 0:
        problems.append(f"[broker] keepalive must be >= 0 s, got {b.keepalive}")
    for key in ("tls_ca", "tls_cert", "tls_key"):
        path = getattr(b, key)
        if path and not os.path.isfile(path):
            problems.append(f"[broker] {key}: no such file {path!r}")
    if bool(b.tls_cert) != bool(b.tls_key):
        problems.append("[broker] tls_cert and tls_key go together (client certificate and its key)")


def check_core(c: CoreConfig, problems: list[str]) -> None:
    from ...solvers.dynamics import SolverOptions

    for name, v in (("asset", c.asset), ("prefix", c.prefix)):
        if not v or any(ch in v for ch in "+#") or v.startswith("/") or v.endswith("/"):
            problems.append(f"[core] {name} must be a non-empty topic level without + # or edge '/', got {v!r}")
    if c.resync_angle not in c.compare or c.resync_speed not in c.compare:
        problems.append("[core] resync_angle and resync_speed must be channels in [core.compare]")
    elif c.compare[c.resync_angle].split(".")[0] != c.compare[c.resync_speed].split(".")[0]:
        problems.append("[core] resync_angle and resync_speed must map to the same body")
    check_alarms(c, problems)
    opts = SolverOptions(method=c.solver_method, rtol=c.solver_rtol, atol=c.solver_atol)
    problems += [f"[core] solver_{p}" for p in opts.problems()]
    if not c.latest_interval > 0:
        problems.append("[core] latest_interval must be > 0 s")
    check_estimator(c, problems)


ALARM_SOURCES = ("residual", "state", "virtual", "meas", "estimate")


def check_alarms(c: CoreConfig, problems: list[str]) -> None:
    """[[core.alarms]]: a known source, 0 <= low <= high, min_duration >= 0, and for source
    ``estimate`` a channel naming an augmented unknown (or its ``.rate``) of the filter."""
    names = [a.name for a in c.augment] if c.estimator == "ekf" else []
    valid = [*names, *(f"{n}.rate" for n in names)]
    for a in c.alarms:
        if a.source not in ALARM_SOURCES or not 0 <= a.low <= a.high or not a.min_duration >= 0:
            problems.append(f"[[core.alarms]] {a.name}: need source {'/'.join(ALARM_SOURCES)}, 0 <= low <= high "
                            f"and min_duration >= 0; got source {a.source!r}, low {a.low!r}, high {a.high!r}, "
                            f"min_duration {a.min_duration!r}")
        elif a.source == "estimate" and a.channel not in valid:
            listed = ", ".join(valid) or "none (no [[core.augment]] with estimator ekf)"
            problems.append(f"[[core.alarms]] {a.name}: channel {a.channel!r} is not an augmented estimate; valid "
                            f"channels for source 'estimate': {listed}")


def check_estimator(c: CoreConfig, problems: list[str]) -> None:
    if c.estimator not in ("ekf", "open_loop"):
        problems.append(f"[core] estimator must be 'ekf' or 'open_loop', got {c.estimator!r}")
    for ch, hold in c.input_hold.items():
        if ch not in c.inputs or hold not in ("foh", "zoh"):
            problems.append(f"[core] input_hold.{ch}: need an input channel and 'foh' or 'zoh', got {hold!r}")
    for ch, sd in c.noise.items():
        if not (isinstance(sd, int | float) and math.isfinite(sd) and sd > 0):
            problems.append(f"[core] noise.{ch} must be a finite number > 0, got {sd!r}")
    for a in c.augment:
        if not (a.sigma > 0 and a.rate >= 0):
            problems.append(f"[[core.augment]] {a.name}: need sigma > 0 and rate >= 0")
        if not isinstance(a.drift, bool):
            problems.append(f"[[core.augment]] {a.name}: drift must be true or false, got {shown(a.drift)}")
    positive = ("accel_noise", "gap_accel_noise", "jacobian_tolerance", "divergence_window", "max_gap",
                "change_mtbfa", "change_shift", "drift_window", "estimate_rate_window", "max_gap_sd",
                "t0_jitter_bound")
    problems += [f"[core] {k} must be > 0, got {getattr(c, k)!r}" for k in positive if not getattr(c, k) > 0]
    if c.change_settle < 0 or c.clock_step_batches < 1:
        problems.append(f"[core] need change_settle >= 0 and clock_step_batches >= 1, got {c.change_settle!r} "
                        f"and {c.clock_step_batches!r}")
    if c.jacobian_every < 1:
        problems.append(f"[core] jacobian_every must be >= 1, got {c.jacobian_every!r}")
    if not (math.isfinite(c.prediction_step) and c.prediction_step >= 0):
        problems.append(f"[core] prediction_step must be a finite step >= 0 s (0: DOP853), got {c.prediction_step!r}")
    if not 0 < c.divergence_probability < 1:
        problems.append(f"[core] divergence_probability must be in (0, 1), got {c.divergence_probability!r}")
    from ..guard import limit_problems

    problems += limit_problems(c)


def check_service(s: ServiceConfig, m: MetricsConfig, problems: list[str]) -> None:
    if not s.hold_levels or any(not isinstance(h, int) or h < 1 for h in s.hold_levels) \
            or list(s.hold_levels) != sorted(s.hold_levels):
        problems.append(f"[service] hold_levels must be increasing positive integers, got {list(s.hold_levels)}")
    if not 0 <= s.start_level < len(s.hold_levels):
        problems.append(f"[service] start_level must index hold_levels (0 .. {len(s.hold_levels) - 1}), "
                        f"got {s.start_level}")
    if s.queue_size < 1 or s.reorder_window < 0 or s.max_message_bytes < 256:
        problems.append("[service] need queue_size >= 1, reorder_window >= 0, max_message_bytes >= 256")
    if not s.rtt_warn_ms >= 0:
        problems.append(f"[service] rtt_warn_ms must be >= 0 ms (0: no warning), got {s.rtt_warn_ms!r}")
    if not s.stop_grace >= 0:
        problems.append(f"[service] stop_grace must be >= 0 s, got {s.stop_grace!r}")
    if not (s.max_seq_jump > s.reorder_window and s.seq_jump_confirm >= 1):
        problems.append(f"[service] need max_seq_jump > reorder_window and seq_jump_confirm >= 1, got "
                        f"{s.max_seq_jump!r} and {s.seq_jump_confirm!r}")
    if not (0 <= s.lag_low <= s.lag_high and 0 < s.flood_lag <= s.max_lag and s.health_interval > 0
            and s.reorder_timeout >= 0):
        problems.append("[service] need 0 <= lag_low <= lag_high, 0 < flood_lag <= max_lag, health_interval > 0, "
                        f"reorder_timeout >= 0; got lag_low {s.lag_low!r}, lag_high {s.lag_high!r}, flood_lag "
                        f"{s.flood_lag!r}, max_lag {s.max_lag!r}, health_interval {s.health_interval!r}, "
                        f"reorder_timeout {s.reorder_timeout!r}")
    if not 0 <= m.port <= 65535:
        problems.append(f"[metrics] port must be 0 (off) .. 65535, got {m.port}")


def check_commands(c: CommandsConfig, problems: list[str]) -> None:
    from ..commands import COMMANDS

    for name in c.enabled:
        if name not in COMMANDS:
            problems.append(f"[commands] enabled: unknown command {shown(name)}; known: {', '.join(COMMANDS)}")
    if c.max_bytes < 64:
        problems.append(f"[commands] max_bytes must be >= 64, got {c.max_bytes!r}")
    if not (math.isfinite(c.rate) and c.rate > 0):
        problems.append(f"[commands] rate must be a finite number > 0 (commands per s), got {c.rate!r}")
    for key in ("burst", "queue_size", "batches_per_command"):
        if getattr(c, key) < 1:
            problems.append(f"[commands] {key} must be >= 1, got {getattr(c, key)!r}")


HISTORY_BACKENDS = ("sqlite", "postgresql", "none")


def check_history(h: HistoryConfig, problems: list[str]) -> None:
    if h.backend not in HISTORY_BACKENDS:
        problems.append(f"[history] backend must be one of {', '.join(HISTORY_BACKENDS)}, got {shown(h.backend)}")
    pgpass = "give it in PGPASSWORD or ~/.pgpass"
    if url_password_problem("[history] dsn", h.dsn, pgpass) \
            or "://" in h.dsn and "@" in h.dsn.split("://", 1)[1].split("/", 1)[0]:
        problems.append(f"[history] dsn must not carry a password (not shown); {pgpass}")
    for key in ("batch_messages", "spool_segment_bytes"):
        if getattr(h, key) < 1:
            problems.append(f"[history] {key} must be >= 1, got {getattr(h, key)!r}")
    for key in ("batch_interval", "retention_interval", "timeout"):
        if not (math.isfinite(getattr(h, key)) and getattr(h, key) > 0):
            problems.append(f"[history] {key} must be a finite number > 0 (s), got {getattr(h, key)!r}")
    if not (math.isfinite(h.retention_days) and h.retention_days >= 0):
        problems.append(f"[history] retention_days must be >= 0 (0: keep all), got {h.retention_days!r}")
    if not 0 < h.retry_min <= h.retry_max:
        problems.append("[history] need 0 < retry_min <= retry_max")


def check_dashboard(d: DashboardConfig, problems: list[str]) -> None:
    for key in ("history_points", "history_channels", "history_samples", "burst", "cache_entries"):
        if getattr(d, key) < 1:
            problems.append(f"[dashboard] {key} must be >= 1, got {getattr(d, key)!r}")
    for key in ("history_wait", "rate"):
        if not (math.isfinite(getattr(d, key)) and getattr(d, key) > 0):
            problems.append(f"[dashboard] {key} must be a finite number > 0, got {getattr(d, key)!r}")
    if not (math.isfinite(d.data_cache_s) and d.data_cache_s >= 0):
        problems.append(f"[dashboard] data_cache_s must be a finite number >= 0 (s), got {d.data_cache_s!r}")
