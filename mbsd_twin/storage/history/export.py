"""``mbsd-twin twin history``: a time range of channels from the history store, as CSV or Parquet.

The export is narrow — one row per sample: ``asset, channel, t, value, sigma`` (rig time in s; an
empty value or σ is null), channels in the order asked, each in time order. Written atomically (a
temporary file beside ``--out``, then ``os.replace``; permissions as the umask gives, as for every
result file: :mod:`mbsd_twin.atomic`). Parquet needs pyarrow; without it the command says so and
exits 2.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import numpy as np

from ...atomic import atomic_path
from .backends import open_store
from .stores import StoreError

COLUMNS = ("asset", "channel", "t", "value", "sigma")


class ExportError(Exception):
    """A problem with the request (bad time, unknown channel, missing pyarrow); exit status 2."""


def parse_time(text: str, what: str) -> float:
    """Rig time in s: a number (e.g. Unix time) or an ISO 8601 date and time (UTC unless it says)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        d = datetime.fromisoformat(text)
    except ValueError:
        raise ExportError(f"{what} {text!r}: expected seconds of rig time (e.g. 1767225600.5) or an ISO 8601 "
                          "time (e.g. 2026-01-01T00:00:00Z)") from None
    return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()


Series = tuple[str, np.ndarray, np.ndarray, np.ndarray]


def query(store: Any, asset: str, channels: list[str], t_from: float, t_to: float) -> list[Series]:
    """(channel, t, value, sigma) of each channel (all of the asset's when ``channels`` is empty)."""
    known = store.channels(asset)
    if not known:
        raise ExportError(f"{store.name}: no history of asset {asset!r}")
    unknown = [c for c in channels if c not in known]
    if unknown:
        raise ExportError(f"{store.name}: asset {asset!r} has no channel {', '.join(map(repr, unknown))}; "
                          f"channels: {', '.join(known)}")
    return [(c, *store.query(asset, c, t_from, t_to)) for c in (channels or known)]


def _cell(x: float) -> str:
    return "" if math.isnan(x) else repr(x)


def _write_csv(path: str, asset: str, series: list[Series]) -> None:
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(COLUMNS)
        for channel, t, value, sigma in series:
            w.writerows((asset, channel, repr(a), _cell(b), _cell(c))
                        for a, b, c in zip(t.tolist(), value.tolist(), sigma.tolist(), strict=True))


def _write_parquet(path: str, asset: str, series: list[Series]) -> None:
    _need_pyarrow()
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = [len(s[1]) for s in series]
    cols = {"asset": pa.array([asset] * sum(n), pa.string()),
            "channel": pa.array([c for (c, *_), k in zip(series, n, strict=True) for _ in range(k)], pa.string())}
    for i, name in enumerate(COLUMNS[2:], start=1):
        data = np.concatenate([s[i] for s in series]) if series else np.empty(0)
        cols[name] = pa.array(data, pa.float64(), mask=np.isnan(data) if name != "t" else None)
    pq.write_table(pa.table(cols), path)


WRITERS: dict[str, Callable[[str, str, list[Series]], None]] = {"csv": _write_csv, "parquet": _write_parquet}


def export(series: list[Series], asset: str, fmt: str, out: str) -> int:
    """Write atomically; the number of samples."""
    with atomic_path(out) as tmp:
        WRITERS[fmt](str(tmp), asset, series)
    return sum(len(s[1]) for s in series)


def cmd_history(args: argparse.Namespace) -> int:
    from ...twin.config.file import load_config

    cfg = load_config(args.config or os.environ.get("MBSD_TWIN_CONFIG") or None)
    h = cfg.history
    if not h.enabled:
        raise ExportError(f"{cfg.source or '<defaults>'}: [history] is off (backend {h.backend!r}, path/dsn empty)")
    if h.backend == "sqlite" and not os.path.exists(h.path):
        raise ExportError(f"[history] path {h.path!r}: no such history database")
    t_from, t_to = parse_time(args.t_from, "--from"), parse_time(args.t_to, "--to")
    if t_to < t_from:
        raise ExportError(f"--to {args.t_to} is before --from {args.t_from}")
    channels = [c for spec in args.channel or [] for c in spec.split(",") if c]
    if args.format == "parquet":
        _need_pyarrow()
    store = open_store(h.backend, h.path, h.dsn, h.timeout, create=False)
    asset = args.asset or cfg.core.asset
    try:
        n = export(query(store, asset, channels, t_from, t_to), asset, args.format, args.out)
    finally:
        store.close()
    print(f"wrote {n} samples of asset {asset!r} ({len(channels) or 'all'} channel(s), rig time {t_from!r} to "
          f"{t_to!r}) to {args.out}")
    return 0


def _need_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ExportError("--format parquet needs pyarrow, which is not installed (pip install pyarrow); "
                          "use --format csv") from None


def run(args: argparse.Namespace) -> int:
    """The command, its problems as one line on stderr and exit status 2 (a store failure: 1)."""
    import sys

    from ...twin.config.sections import ConfigError

    try:
        return cmd_history(args)
    except (ExportError, ConfigError) as exc:
        print(f"mbsd-twin twin history: {exc}", file=sys.stderr)
        return 2
    except (StoreError, OSError) as exc:
        print(f"mbsd-twin twin history: {exc}", file=sys.stderr)
        return 1


def add_parser(tsub: Any) -> None:
    h = tsub.add_parser("history", help="export a time range of the twin's history (CSV or Parquet)")
    h.add_argument("--config", help="twin TOML file with the [history] section (default $MBSD_TWIN_CONFIG)")
    h.add_argument("--from", dest="t_from", default="-inf",
                   help="start, rig time in s (e.g. Unix time) or ISO 8601 (default: the beginning)")
    h.add_argument("--to", dest="t_to", default="inf", help="end, inclusive (default: the end)")
    h.add_argument("--channel", action="append", metavar="NAME",
                   help="channel, e.g. state.theta or estimates.piston.mass (repeat or comma-separate; default: all)")
    h.add_argument("--asset", help="asset id (default: the config's [core] asset)")
    h.add_argument("--format", choices=tuple(WRITERS), default="csv")
    h.add_argument("--out", required=True, help="output file (written atomically)")
    h.set_defaults(func=run)
