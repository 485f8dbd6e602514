"""Service configuration: typed frozen dataclasses, one per section of the TOML file.

Every field has a documented default (docs/service-config.md); :func:`.file.load_config`
reads a file plus environment overrides and collects every problem before raising one
:class:`ConfigError`; secrets (the password) never appear in reprs, logs or the config hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse


class ConfigError(ValueError):
    """The configuration is invalid; ``problems`` lists every problem found."""

    def __init__(self, problems: list[str], source: str = "<config>") -> None:
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} configuration problem(s)\n"
                         + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class BrokerConfig:
    url: str = "mqtt://127.0.0.1:1883"
    username: str = ""
    password: str = field(default="", repr=False)
    client_id: str = ""
    keepalive: int = 30
    protocol: int = 5  # 5 (MQTT 5, response topics) or 4 (MQTT 3.1.1)
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_insecure: bool = False
    reconnect_min: float = 1.0
    reconnect_max: float = 10.0

    @property
    def host(self) -> str:
        return urlparse(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        u = urlparse(self.url)
        return u.port or (8883 if u.scheme == "mqtts" else 1883)

    @property
    def tls(self) -> bool:
        return urlparse(self.url).scheme == "mqtts" or bool(self.tls_ca)


@dataclass(frozen=True)
class AlarmConfig:
    """Raised when |value| >= ``high`` for ``min_duration`` s of rig time, cleared when |value| <=
    ``low`` for ``min_duration``. ``source``: residual, state, virtual, meas (channels, in their
    unit) or estimate (an augmented unknown ``<name>`` in its unit, or ``<name>.rate``: its rate of
    change over ``[core] estimate_rate_window``, unit per s; read once the change tests are armed)."""

    name: str
    channel: str
    source: str = "residual"
    high: float = 1.0
    low: float = 0.5
    min_duration: float = 0.1


@dataclass(frozen=True)
class AugmentConfig:
    """An unknown the filter estimates beside the motion: a model parameter (``piston.mass``) or an
    input bias (``motor_torque.bias``: the model is driven by measured value + bias). ``sigma``:
    prior σ; ``rate``: random-walk σ per √s (how fast it may change); ``value``: prior mean (nan:
    the model's value, 0 for a bias); ``low``/``high``: the plausible range the estimate is held in
    (nan: a tenth and ten times a positive parameter's prior, unbounded for a bias); ``drift``: run
    the slow-drift test on the estimate (needs rate > 0; docs/twin-estimation.md, "Drift alarms")."""

    name: str
    sigma: float = 1.0
    rate: float = 0.0
    value: float = math.nan
    low: float = math.nan
    high: float = math.nan
    drift: bool = True


@dataclass(frozen=True)
class CoreConfig:
    """Everything that determines the twin's outputs from its inputs (stored in recordings)."""

    asset: str = "sc-01"
    prefix: str = "dt/v1"
    inputs: dict[str, str] = field(default_factory=lambda: {"tau_m": "motor_torque"})
    compare: dict[str, str] = field(default_factory=lambda: {
        "theta": "crank.theta", "omega": "crank.omega", "f_x": "main_bearing.fx", "f_y": "main_bearing.fy"})
    state_extra: tuple[str, ...] = ("piston.x", "piston.vx")
    virtual: tuple[str, ...] = ()  # model outputs; empty: every joint reaction
    resync_angle: str = "theta"
    resync_speed: str = "omega"
    resync_bounds: dict[str, float] = field(default_factory=lambda: {"theta": 0.1, "omega": 5.0})
    alarms: tuple[AlarmConfig, ...] = ()
    alarm_max_events_per_minute: int = 6
    latest_interval: float = 0.5
    solver_method: str = "DOP853"  # DOP853 runs on the engine's compiled path (~50x the numpy speed)
    solver_rtol: float = 1e-6
    solver_atol: float = 1e-8
    estimator: str = "ekf"  # "ekf": Kalman filter (docs/twin-estimation.md); "open_loop": model + re-sync
    input_hold: dict[str, str] = field(default_factory=dict)  # input channel → "foh" (default) or "zoh"
    noise: dict[str, float] = field(default_factory=lambda: {  # σ of each channel's samples, its unit
        "theta": 1e-3, "omega": 0.01, "f_x": 0.5, "f_y": 0.5, "tau_m": 0.002})
    coordinates: tuple[str, ...] = ()  # independent coordinates (outputs); empty: the resync_angle's
    accel_noise: float = 0.01  # white-acceleration density per coordinate, rad/s²/√Hz (m/s²/√Hz)
    gap_accel_noise: float = 2.0  # the same while predicting through a gap (inputs unknown in between)
    augment: tuple[AugmentConfig, ...] = (AugmentConfig("motor_torque.bias", 0.5, 0.01),
                                          AugmentConfig("piston.mass", 0.2, 0.002))
    jacobian_every: int = 20  # most corrections between finite-difference Jacobians of the filter's step
    jacobian_tolerance: float = 0.05  # σ: refresh sooner, by travel, when the Jacobians change faster
    prediction_step: float = 0.0  # s: > 0, the prediction in fixed Runge–Kutta steps of at most this; 0: DOP853
    divergence_window: float = 0.5  # s: mean NIS over this window above its χ² bound → re-initialise
    divergence_probability: float = 1e-9  # chance that a consistent filter exceeds that bound per window
    isolation_window: float = 0.1  # s after a change alarm's onset replayed to isolate its cause; 0: off
    max_gap: float = 0.5  # s: predict through gaps up to this long; longer ones re-initialise
    max_gap_sd: float = math.inf  # coordinate unit (rad): ... unless the prediction's σ of a coordinate exceeds this
    change_settle: int = 20  # samples after a re-initialisation that keeps the unknowns before the tests re-arm
    t0_jitter_bound: float = 0.05  # s: a batch's t0 this close to the time base's expectation is jitter
    clock_step_batches: int = 3  # batches in a row beyond the bound, agreeing on one offset: a clock step
    change_mtbfa: float = 604800.0  # s: mean time between false change alarms, per statistic
    change_shift: float = 1.0  # σ: the change (in normalised units) the CUSUM is tuned for
    drift_window: float = 0.5  # s: shortest block of the drift tests (longer: 4 time constants of the estimate)
    estimate_rate_window: float = 1.0  # s: window of an estimate's rate of change (threshold alarms `.rate`)
    input_limit: float = 0.0  # > 0: one plausible |value| limit for every channel (inf: none); 0: derived
    channel_limits: dict[str, float] = field(default_factory=dict)  # channel → its own |value| limit
    max_speed: float = 1000.0  # largest speed of the coordinates (rad/s; m/s for a length) the limits allow for
    limit_factor: float = 4.0  # derived limit = factor × the model's envelope (twin/plausible.py) + 10 σ
    max_solver_steps: int = 5000  # solver steps a batch may take (+ 100/sample + 300,000/s of isolation_window)
    param_factor: float = 1e3  # set_param: within [file value / factor, file value · factor]
    param_limits: dict[str, list[float]] = field(default_factory=dict)  # parameter → [low, high]

    @property
    def base(self) -> str:
        return f"{self.prefix}/{self.asset}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CoreConfig:
        d = dict(data)
        d["alarms"] = tuple(AlarmConfig(**a) for a in d.get("alarms", ()))
        if "augment" in d:
            d["augment"] = tuple(AugmentConfig(**a) for a in d["augment"])
        for k in ("state_extra", "virtual", "coordinates"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)


@dataclass(frozen=True)
class ServiceConfig:
    """Runtime settings around the core: mechanism file, limits, queues, timers."""

    mechanism: str = ""  # the mechanism file; "" the slider crank packaged with mbsd-twin
    max_message_bytes: int = 262144
    reorder_window: int = 5  # messages held back waiting for a missing seq
    reorder_timeout: float = 0.2  # s (wall) a batch waits at most for a missing predecessor (10 batches at 1 kHz/20)
    queue_size: int = 50  # batches waiting for the solver
    hold_levels: tuple[int, ...] = (1, 5, 20)  # samples per solver step, finest first
    start_level: int = 0  # hold_levels[0] = 1: every sample (sustained at 1 kHz, benchmarks/bench_twin.py)
    lag_high: float = 0.25  # s: coarser above
    lag_low: float = 0.05  # s: finer after `lag_low_batches` batches below
    lag_low_batches: int = 100
    max_lag: float = 0.5  # s: a backlog this old is coalesced (the worker skips to the newest batch)
    flood_lag: float = 0.03  # s: the same while batches arrive faster than the worker works them off
    health_interval: float = 1.0
    rtt_warn_ms: float = 20.0  # ms: median broker round trip of the probe pairs above which health warns; 0: off
    max_seq_jump: int = 1000  # messages: a seq further from the expected one is implausible
    seq_jump_confirm: int = 3  # consecutive implausible seqs that continue one another: a renumbering
    stop_grace: float = 5.0  # s after SIGTERM before a stuck service is killed (its will published); 0: off


@dataclass(frozen=True)
class CommandsConfig:
    """Commands on ``{p}/{a}/twin/cmd/<name>`` (docs/mqtt-contract.md, "Commands"). Off by default
    except the read-only ``status``; who may send them is the broker's ACL (services/mosquitto.acl)."""

    enabled: tuple[str, ...] = ("status",)  # of status, reset, set_param, pause, resume
    max_bytes: int = 4096  # a whole command message (topic, body, response topic, correlation data)
    rate: float = 2.0  # commands per second, sustained (token bucket); beyond: dropped, no reply
    burst: int = 10  # commands accepted back to back
    queue_size: int = 20  # commands waiting for the worker; beyond: dropped
    batches_per_command: int = 5  # while sensor batches wait: at most one command per this many batches


@dataclass(frozen=True)
class RecordConfig:
    path: str = ""  # empty: no recording
    max_bytes: int = 256 * 1024 * 1024  # per segment
    keep: int = 0  # segments kept (0: all)
    retry_min: float = 1.0  # s: after a write failure the recording is suspended, retried after this ...
    retry_max: float = 30.0  # s: ... doubling up to this (docs/service-config.md, mbsd_twin/twin/sinks.py)


@dataclass(frozen=True)
class HistoryConfig:
    """The history store (docs/history.md): what the twin publishes, written off the sample loop in
    batches; a store outage spools to disk and catches up later."""

    backend: str = "sqlite"  # sqlite | postgresql | none
    path: str = ""  # sqlite: the database file; "" (and dsn "" for postgresql): no history
    dsn: str = ""  # postgresql: libpq connection string, e.g. "host=db dbname=twin user=twin" (password: PGPASSWORD)
    spool_dir: str = ""  # "": <path>.spool (sqlite) or ./history-spool (postgresql)
    batch_messages: int = 1000  # output messages per store transaction (at most)
    batch_interval: float = 0.5  # s: pending messages are written at least this often
    retention_days: float = 0.0  # blocks older than this (rig time, per channel) are deleted; 0: keep all
    retention_interval: float = 3600.0  # s between retention passes
    retry_min: float = 1.0  # s: after a store failure the writer spools and retries after this ...
    retry_max: float = 30.0  # s: ... doubling up to this
    timeout: float = 5.0  # s: connect / lock wait / statement limit of one store call
    spool_segment_bytes: int = 64 * 1024 * 1024  # the spool rotates into a new segment at this size

    @property
    def enabled(self) -> bool:
        return self.backend != "none" and bool(self.path if self.backend == "sqlite" else self.dsn)


@dataclass(frozen=True)
class DashboardConfig:
    """The dashboard's read endpoints (docs/history.md, "The dashboard's history view"): bounds of a
    history request, the per-client rate limit and the reply caches."""

    history_points: int = 2000  # buckets per channel a history request may ask for (points), at most
    history_channels: int = 8  # distinct channels per history request, at most
    history_samples: int = 50_000_000  # stored samples one history request may read (all its channels), at most
    history_wait: float = 2.0  # s a history request waits for the one being read before it (then 503)
    rate: float = 20.0  # read requests per s per client address (token bucket; 429 beyond)
    burst: int = 40  # read requests a client address may make at once
    data_cache_s: float = 0.1  # s a data reply is reused for its cursor even if the store changed
    cache_entries: int = 32  # replies kept per read endpoint (history: also at most 16 MB)


@dataclass(frozen=True)
class MetricsConfig:
    host: str = "127.0.0.1"
    port: int = 0  # 0: no HTTP endpoint


@dataclass(frozen=True)
class TwinConfig:
    broker: BrokerConfig = BrokerConfig()
    core: CoreConfig = CoreConfig()
    service: ServiceConfig = ServiceConfig()
    commands: CommandsConfig = CommandsConfig()
    record: RecordConfig = RecordConfig()
    metrics: MetricsConfig = MetricsConfig()
    history: HistoryConfig = HistoryConfig()
    dashboard: DashboardConfig = DashboardConfig()
    source: str = field(default="", compare=False)  # the TOML file read ("" none): named in messages

    def config_hash(self) -> str:
        """Hash of everything except secrets, the file name and the dashboard's read limits (which
        change nothing the twin computes: a checkpoint stays valid across them)."""
        d = dataclasses.asdict(self)
        d["broker"].pop("password", None)
        d.pop("source", None)
        d.pop("dashboard", None)
        return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]
