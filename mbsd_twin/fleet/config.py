"""The fleet file (docs/fleet.md): ``[fleet]`` settings and one ``[[asset]]`` table per twin.

``load_fleet`` validates everything before anything runs — the fleet keys, each asset's id, its
mechanism file (read and checked) and its whole twin configuration (``load_config`` with the
asset's overrides) — and raises one :class:`FleetError` listing every problem, each naming the
file and the key (a running fleet reports a bad edit and keeps the assets it has).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import os
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from ..model.loader import bundled_slider_crank, loads_mechanism
from ..model.values import suggest
from ..twin.config.file import load_config
from ..twin.config.paths import resolve_path, resolve_twin_paths
from ..twin.config.sections import BrokerConfig, ConfigError, TwinConfig
from ..twin.redaction import redact, url_password_problem

ASSET_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # one MQTT topic level, no wildcards
LOGIN = re.compile(r"^(?:[A-Za-z0-9_.-]|\{asset\}){1,64}$")  # a broker user name ({asset}: the asset id)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class FleetError(ValueError):
    def __init__(self, problems: list[str], source: str) -> None:
        self.problems = problems
        super().__init__(f"{source}: {len(problems)} fleet problem(s)\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class FleetSettings:
    """``[fleet]``; relative paths are relative to the fleet file's folder (docs/service-config.md,
    "Relative paths")."""

    broker: str = ""  # broker URL of every asset ("": each asset's twin config's)
    config: str = ""  # twin TOML every asset starts from ("": the defaults)
    store: str = ""  # checkpoint store: a SQLite path, sqlite:///path or postgresql://…; "": beside the file
    checkpoint_interval: float = 5.0  # s between checkpoints of each twin
    watch_interval: float = 1.0  # s between looks at the fleet file's mtime
    restart_delay: float = 1.0  # s (local) before a dead twin's process is started again
    max_restarts: int = -1  # restarts per asset (local and Ray actors); -1: no limit
    twins_per_process: int = 1  # local: assets sharing one process (docs/fleet.md); 1: a process per asset
    max_task_retries: int = -1  # Ray: retries of an actor call across restarts; -1: no limit
    ray_num_cpus: float = 0.5  # Ray: CPUs reserved per twin actor
    ray_strategy: str = "SPREAD"  # Ray: actor placement, SPREAD or DEFAULT
    status_topic: str = ""  # the fleet's retained status topic; "": "{[core] prefix}/fleet/status"
    status_interval: float = 10.0  # s between publications of the fleet status (also at every change)
    password_env: str = "MBSD_TWIN_PASSWORD"  # the variable of each twin's own environment with the broker password
    twin_username: str = ""  # each twin's broker login, "{asset}" replaced ("": the twin config's [broker] username)
    fleet_username: str = ""  # the fleet status's broker login ("": the twin config's [broker] username)


@dataclass(frozen=True)
class AssetSpec:
    """One ``[[asset]]``: ``id`` (the asset topic level), ``mechanism``, ``config`` (a twin TOML
    instead of the fleet's) and ``overrides`` (twin config tables, e.g. ``[asset.overrides.service]``)."""

    id: str
    mechanism: str = ""
    config: str = ""
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def twin_config(self, fleet: FleetSettings) -> TwinConfig:
        over: dict[str, dict[str, Any]] = {sec: dict(kv) for sec, kv in self.overrides.items()}
        over.setdefault("core", {})["asset"] = self.id
        if self.mechanism:
            over.setdefault("service", {})["mechanism"] = self.mechanism
        if fleet.broker and "url" not in over.get("broker", {}):
            over.setdefault("broker", {})["url"] = fleet.broker
        return with_password(load_config(self.config or fleet.config or None, env={}, overrides=over), fleet,
                             fleet.twin_username.replace("{asset}", self.id))


def with_password(cfg: TwinConfig, fleet: FleetSettings, login: str = "") -> TwinConfig:
    """``cfg`` with the broker password of this process's own environment (the variable ``[fleet]
    password_env`` names), read where the twin runs — a fleet child process, a Ray actor on its node
    — so it never travels as an argument or on a command line; unset: the twin TOML's, if any.
    ``login``: a login of its own (an asset's twin, the fleet): that user name, and its password
    derived from the secret in ``password_env`` (:func:`login_password`)."""
    secret = os.environ.get(fleet.password_env, "")
    b = cfg.broker
    if login:
        b = dataclasses.replace(b, username=login, password=login_password(secret, login) if secret else b.password)
    elif secret:
        b = dataclasses.replace(b, password=secret)
    return dataclasses.replace(cfg, broker=b)


def login_password(secret: str, login: str) -> str:
    """The broker password of ``login`` (an asset's twin user, the fleet user): derived from the one
    secret of ``[fleet] password_env``, so each login has its own password (a twin's, leaked, opens
    only its asset's topics) while the fleet's processes hold one secret. ``mbsd-twin fleet acl
    --passwords`` writes the broker's password lines from the same secret."""
    mac = hmac.new(secret.encode(), f"mbsd-twin broker login {login}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).decode()[:32]


@dataclass(frozen=True)
class FleetConfig:
    path: str
    settings: FleetSettings
    assets: tuple[AssetSpec, ...]

    def by_id(self) -> dict[str, AssetSpec]:
        return {a.id: a for a in self.assets}

    def status_target(self) -> tuple[BrokerConfig, str]:
        """The broker and topic of the fleet's own status: the ``[broker]`` of the fleet's twin
        config (``[fleet] broker`` for its URL) and ``status_topic`` (default under its ``[core]
        prefix``)."""
        s = self.settings
        cfg = with_password(load_config(s.config or None, env={}, overrides={"broker": {"url": s.broker}} if s.broker
                                        else None), s, s.fleet_username)
        return cfg.broker, s.status_topic or f"{cfg.core.prefix}/fleet/status"


def _settings(table: Any, path: str, problems: list[str]) -> FleetSettings:
    if not isinstance(table, dict):
        problems.append("[fleet] must be a table")
        return FleetSettings()
    d = FleetSettings()
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(FleetSettings):
        if f.name not in table:
            continue
        v, default = table[f.name], getattr(d, f.name)
        ok = isinstance(v, type(default)) and not isinstance(v, bool) or isinstance(default, float) \
            and isinstance(v, int) and not isinstance(v, bool)
        if not ok:
            problems.append(f"[fleet] {f.name}: expected {type(default).__name__}, got {redact(repr(v))[:200]}")
            continue
        kw[f.name] = float(v) if isinstance(default, float) else v
    known = [f.name for f in dataclasses.fields(FleetSettings)]
    for k in sorted(set(table) - set(known)):
        problems.append(f"[fleet] unknown key {k!r}{suggest(k, known)}; known: {', '.join(known)}")
    s = dataclasses.replace(d, **kw)
    for name in ("checkpoint_interval", "watch_interval", "restart_delay", "status_interval"):
        if not getattr(s, name) > 0:
            problems.append(f"[fleet] {name}: must be > 0, got {getattr(s, name)!r}")
    if s.twins_per_process < 1:
        problems.append(f"[fleet] twins_per_process: must be >= 1, got {s.twins_per_process!r}")
    if s.status_topic and ("+" in s.status_topic or "#" in s.status_topic):
        problems.append(f"[fleet] status_topic: no wildcards (+, #) in a topic to publish on, got {s.status_topic!r}")
    if not ENV_NAME.match(s.password_env):
        problems.append(f"[fleet] password_env: an environment variable name, got {s.password_env!r}")
    for key in ("twin_username", "fleet_username"):
        if getattr(s, key) and not LOGIN.match(getattr(s, key)):
            problems.append(f"[fleet] {key}: 1-64 letters, digits, '_', '.', '-' (and {{asset}}), got "
                            f"{getattr(s, key)!r}")
    if s.ray_strategy not in ("SPREAD", "DEFAULT"):
        problems.append(f"[fleet] ray_strategy: SPREAD or DEFAULT, got {s.ray_strategy!r}")
    for key, instead in (("store", "give it in PGPASSWORD or ~/.pgpass of the processes that run the twins"),
                         ("broker", f"give it in the environment variable {s.password_env} (password_env) of the "
                                    "processes that run the twins")):
        problem = url_password_problem(f"[fleet] {key}", getattr(s, key), instead)
        if problem:
            problems.append(problem)
            s = dataclasses.replace(s, store="") if key == "store" else dataclasses.replace(s, broker="")
    store = resolve_path(s.store or "fleet-checkpoints.sqlite", path, "[fleet] store", "output")
    return dataclasses.replace(s, config=resolve_path(s.config, path, "[fleet] config"), store=store)


ASSET_KEYS = ("id", "mechanism", "config", "overrides")  # of an [[asset]] table


def _asset(i: int, t: Any, path: str, problems: list[str]) -> AssetSpec | None:
    where = f"[[asset]] #{i + 1}"
    if not isinstance(t, dict):
        problems.append(f"{where}: must be a table")
        return None
    unknown = sorted(set(t) - set(ASSET_KEYS))
    if unknown:
        hints = "".join(suggest(k, ASSET_KEYS) for k in unknown)
        problems.append(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}{hints}; known: "
                        f"{', '.join(ASSET_KEYS)}")
    aid = t.get("id")
    if not isinstance(aid, str) or not ASSET_ID.match(aid):
        problems.append(f"{where} id: expected 1-64 letters, digits, '_', '.', '-', got {aid!r}")
        return None
    where = f"[[asset]] {aid!r}"
    kw: dict[str, Any] = {}
    for k in ("mechanism", "config"):
        if k in t and not isinstance(t[k], str):
            problems.append(f"{where} {k}: expected a file name, got {t[k]!r}")
        elif k in t:
            kw[k] = resolve_path(t[k], path, f"{where} {k}")
    over = t.get("overrides", {})
    if not isinstance(over, dict) or not all(isinstance(v, dict) for v in over.values()):
        problems.append(f"{where} overrides: expected tables of twin config sections, got {redact(repr(over))[:200]}")
        over = {}
    if "password" in over.get("broker", {}):  # it would travel to the twin as an argument (a Ray actor's too)
        problems.append(f"{where} overrides.broker.password: not taken from the fleet file (not shown); give it "
                        "in the environment variable named by [fleet] password_env (default MBSD_TWIN_PASSWORD) "
                        "of the processes that run the twins")
        over = {**over, "broker": {k: v for k, v in over["broker"].items() if k != "password"}}
    # twin configuration in the fleet file: its paths relative to the fleet file too (they were relative
    # to the working directory: moved)
    return AssetSpec(aid, overrides=resolve_twin_paths(over, path, problems, f"{where} overrides"), **kw)


def _check_asset(a: AssetSpec, s: FleetSettings, problems: list[str]) -> None:
    where = f"[[asset]] {a.id!r}"
    try:
        cfg = a.twin_config(s)
    except ConfigError as exc:
        problems += [f"{where}: {p}" for p in exc.problems]
        return
    mech = cfg.service.mechanism or str(bundled_slider_crank())
    try:
        with open(mech, encoding="utf-8") as fh:
            loads_mechanism(fh.read(), source=mech)
    except Exception as exc:  # noqa: BLE001 - every problem of the file is reported, none raised
        first = str(exc).splitlines()[0] if str(exc) else ""
        problems.append(f"{where} mechanism {mech!r}: {type(exc).__name__}: {first}")


def load_fleet(path: str) -> FleetConfig:
    """The fleet file, fully validated (:class:`FleetError` listing every problem)."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise FleetError([str(exc)], path) from exc
    problems = [f"unknown table [{k}]; known: [fleet], [[asset]]" for k in data if k not in ("fleet", "asset")]
    settings = _settings(data.get("fleet", {}), path, problems)
    items = data.get("asset", [])
    if not isinstance(items, list):
        problems.append("asset must be an array of tables ([[asset]])")
        items = []
    assets = [a for i, t in enumerate(items) if (a := _asset(i, t, path, problems)) is not None]
    seen: set[str] = set()
    for a in assets:
        if a.id in seen:
            problems.append(f"[[asset]] {a.id!r}: listed twice")
        seen.add(a.id)
        _check_asset(a, settings, problems)
    if problems:
        raise FleetError(problems, path)
    return FleetConfig(os.path.abspath(path), settings, tuple(assets))
