"""Reading a service configuration (:mod:`.sections`): TOML plus environment overrides, every value
coerced to its field's type and every section checked (:mod:`.checks`); ``load_config``
collects every problem before raising one :class:`~.sections.ConfigError`, naming the file and key
or the environment variable a value came from; secrets are never shown."""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
from typing import Any

from ...model.values import suggest
from .checks import (
    check_broker,
    check_commands,
    check_core,
    check_dashboard,
    check_history,
    check_service,
    shown,
)
from .paths import resolve_twin_paths
from .sections import (
    AlarmConfig,
    AugmentConfig,
    BrokerConfig,
    CommandsConfig,
    ConfigError,
    CoreConfig,
    DashboardConfig,
    HistoryConfig,
    MetricsConfig,
    RecordConfig,
    ServiceConfig,
    TwinConfig,
)

ENV = {  # environment variable → (section, key)
    "MBSD_TWIN_BROKER": ("broker", "url"),
    "MBSD_TWIN_USERNAME": ("broker", "username"),
    "MBSD_TWIN_PASSWORD": ("broker", "password"),
    "MBSD_TWIN_TLS_CA": ("broker", "tls_ca"),
    "MBSD_TWIN_ASSET": ("core", "asset"),
    "MBSD_TWIN_PREFIX": ("core", "prefix"),
    "MBSD_TWIN_MECHANISM": ("service", "mechanism"),
    "MBSD_TWIN_RECORD": ("record", "path"),
    "MBSD_TWIN_METRICS_PORT": ("metrics", "port"),
    "MBSD_TWIN_METRICS_HOST": ("metrics", "host"),
    "MBSD_TWIN_HISTORY_PATH": ("history", "path"),
    "MBSD_TWIN_HISTORY_DSN": ("history", "dsn"),
    "MBSD_TWIN_HISTORY_BACKEND": ("history", "backend"),
    "MBSD_TWIN_HISTORY_SPOOL_DIR": ("history", "spool_dir"),
}
SECRET_KEYS = ("password", "dsn")


_SECTIONS = {"broker": BrokerConfig, "core": CoreConfig, "service": ServiceConfig, "commands": CommandsConfig,
             "record": RecordConfig, "metrics": MetricsConfig, "history": HistoryConfig,
             "dashboard": DashboardConfig}


def _coerce(value: Any, default: Any) -> tuple[bool, Any]:
    """(ok, value converted to the default's type); TOML values or environment strings."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
            return True, value.lower() in ("true", "1")
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return True, value
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            return True, int(value)
    elif isinstance(default, float):
        try:
            x = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            x = math.nan
        return not math.isnan(x), x
    elif isinstance(default, str):
        return isinstance(value, str), value
    elif isinstance(default, tuple):
        return isinstance(value, list | tuple), tuple(value) if isinstance(value, list | tuple) else value
    elif isinstance(default, dict):
        return isinstance(value, dict), dict(value) if isinstance(value, dict) else value
    return False, value


def _where(section: str, key: str, origins: dict[tuple[str, str], str]) -> str:
    origin = origins.get((section, key))
    return f"[{section}] {key}" + (f" (from {origin})" if origin else "")


def _section(cls: type, table: dict[str, Any], name: str, problems: list[str],
             origins: dict[tuple[str, str], str]) -> Any:
    defaults = cls()
    names = {f.name for f in dataclasses.fields(cls)}
    kw: dict[str, Any] = {}
    for key, value in table.items():
        where = _where(name, key, origins)
        if key not in names:
            problems.append(f"[{name}] unknown key {key!r}{suggest(key, names)}; known: {', '.join(sorted(names))}")
        elif key in ("alarms", "augment"):
            kw[key] = _tables(key, value, problems)
        else:
            default = getattr(defaults, key)
            ok, kw[key] = _coerce(value, default)
            if not ok:
                kw[key] = default
                problems.append(f"{where}: invalid value (not shown: secret)" if key in SECRET_KEYS else
                                f"{where}: expected {type(default).__name__}, got {shown(value)}")
    return dataclasses.replace(defaults, **kw)


def _tables(key: str, items: Any, problems: list[str]) -> tuple[Any, ...]:
    """[[core.alarms]] or [[core.augment]] tables as their dataclasses."""
    cls = AlarmConfig if key == "alarms" else AugmentConfig
    out = []
    if not isinstance(items, list | tuple):
        problems.append(f"[[core.{key}]] must be an array of tables")
    for i, a in enumerate(items if isinstance(items, list | tuple) else []):
        try:
            out.append(a if isinstance(a, cls) else cls(**a))
        except TypeError as exc:
            problems.append(f"[[core.{key}]] #{i}: {exc}")
    return tuple(out)


def _read(path: str | None, env: dict[str, str], overrides: dict[str, dict[str, Any]] | None,
          problems: list[str]) -> tuple[dict[str, Any], dict[tuple[str, str], str]]:
    """The merged tables (TOML ← environment ← overrides) and where non-file values came from; the
    file's relative paths are relative to its folder, those of the environment and the overrides
    to the working directory (:mod:`.paths`)."""
    data: dict[str, Any] = {}
    origins: dict[tuple[str, str], str] = {}
    if path:
        try:
            with open(path, "rb") as fh:
                data = resolve_twin_paths(tomllib.load(fh), path, problems)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError([str(exc)], path) from exc
    for var, (sec, key) in ENV.items():
        if env.get(var):
            data.setdefault(sec, {})[key] = env[var]
            origins[(sec, key)] = var
    for sec, kv in (overrides or {}).items():
        for key, value in kv.items():
            if value is not None:
                data.setdefault(sec, {})[key] = value
                origins[(sec, key)] = "the command line"
    return data, origins


def load_config(path: str | None = None, env: dict[str, str] | None = None,
                overrides: dict[str, dict[str, Any]] | None = None) -> TwinConfig:
    """TOML file (optional) ← environment (``MBSD_TWIN_*``) ← explicit overrides (CLI flags).

    Relative paths of the file are relative to its folder, those of the environment and
    ``overrides`` to the working directory (:mod:`.paths`). Raises :class:`ConfigError` listing
    every problem; each names its key (and the environment variable it came from); secrets are
    never shown."""
    problems: list[str] = []
    data, origins = _read(path, dict(os.environ) if env is None else env, overrides, problems)
    parts: dict[str, Any] = {}
    for sec, table in data.items():
        if sec not in _SECTIONS or not isinstance(table, dict):
            problems.append(f"unknown section [{sec}]{suggest(sec, _SECTIONS)}; known: {', '.join(_SECTIONS)}")
            continue
        parts[sec] = _section(_SECTIONS[sec], table, sec, problems, origins)
    cfg = TwinConfig(**parts, source=path or "")
    check_broker(cfg.broker, problems)
    check_core(cfg.core, problems)
    check_service(cfg.service, cfg.metrics, problems)
    if not 0 < cfg.record.retry_min <= cfg.record.retry_max:
        problems.append("[record] need 0 < retry_min <= retry_max")
    check_commands(cfg.commands, problems)
    check_history(cfg.history, problems)
    check_dashboard(cfg.dashboard, problems)
    if problems:
        raise ConfigError(problems, path or "<defaults>")
    return cfg
