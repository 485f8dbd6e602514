"""The history store under a 20-asset fleet: a slider-crank twin's outputs (state, residuals,
virtual, estimates, alarms — 32 channels) at 1 kHz in batches of 20 for each of ``--assets`` assets.
First the writer's capacity (the stream converted and written as fast as it goes); then the stream
offered in real time to one history writer (the twin's own ``HistoryWriter``, its thread beside the
feeder, as in ``twin serve``), for SQLite and PostgreSQL. Prints blocks (rows) and samples written
per second, the store's lag (offer → commit) p50/p99/max, what had to be spooled (a store that
cannot keep up spools: the figure is sustained only when nothing was spooled) and the drain time
after the stream stops. Then the query: one channel of one asset over ``--hour`` s at 1 kHz
(3.6 M samples for an hour) among that asset's 31 other channels, through the store's ``query``
(``--block`` samples per stored block).

    .venv/bin/python benchmarks/bench_history.py [--seconds 20] [--assets 20] [--hour 3600]
        [--dsn "host=127.0.0.1 user=postgres dbname=postgres"]   (a database bench_history_* is made and dropped)
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mbsd_twin.model.loader import load_mechanism
from mbsd_twin.rig.synthetic import RigConfig, stream
from mbsd_twin.storage.history.backends import open_store
from mbsd_twin.storage.history.rows import Block, convert
from mbsd_twin.storage.history.writer import HistoryWriter
from mbsd_twin.twin.config.sections import AlarmConfig, CoreConfig, HistoryConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import encode, parse_sensor

MECH = str(Path(__file__).resolve().parents[1] / "examples" / "mechanisms" / "slider_crank.toml")


def templates() -> list[list[tuple[str, dict[str, Any]]]]:
    """One second of a twin's outputs per rig batch: [(topic leaf, message)] × 50."""
    mech = load_mechanism(MECH)
    alarm = AlarmConfig("theta_residual", "theta", "residual", high=5e-3, low=1e-3, min_duration=0.002)
    core = TwinCore(CoreConfig(alarms=(alarm,)), mech)
    out = []
    for m in stream(mech, RigConfig(), 1.0):
        outs = core.step(parse_sensor(encode(m).encode(), "sc-01", 1 << 20), 1)  # type: ignore[arg-type]
        out.append([(o.topic.rsplit("/", 1)[-1], orjson.loads(o.payload)) for o in outs
                    if not o.topic.endswith("/latest")])
    return out


def feed(writer: HistoryWriter, tpl: list[list[tuple[str, dict[str, Any]]]], assets: int, seconds: float
         ) -> tuple[float, list[float]]:
    """Offer every asset's batch every 20 ms of wall time; (seconds behind real time at the end, lags)."""
    t_start, lags, next_poll = time.perf_counter(), [], 0.0
    for i in range(int(seconds * 50)):
        due = t_start + i * 0.02
        while (now := time.perf_counter()) < due:
            time.sleep(min(0.005, due - now))
        for a in range(assets):
            for leaf, m in tpl[i % 50]:
                msg = {**m, "asset": f"sc-{a:02d}"}
                if "t0" in msg:
                    msg["t0"] = m["t0"] + (i // 50)
                writer.offer(f"dt/v1/sc-{a:02d}/twin/{leaf}", orjson.dumps(msg).decode())
        if now - t_start >= next_poll:
            next_poll += 0.25
            lags.append(writer.status()["lag_s"])
    return time.perf_counter() - t_start - seconds, lags


def capacity(name: str, cfg: HistoryConfig, tpl: Any, assets: int, seconds: float) -> None:
    """The writer's own cost: the same stream converted and written as fast as it goes (no feeder),
    in batches of ``batch_messages``; CPU time of this process and wall time."""
    msgs = []
    for i in range(int(seconds * 50)):
        for a in range(assets):
            for leaf, m in tpl[i % 50]:
                msg = {**m, "asset": f"sc-{a:02d}"}
                if "t0" in msg:
                    msg["t0"] = m["t0"] + (i // 50)
                msgs.append((leaf, 0.0, orjson.dumps(msg).decode()))
    store = open_store(cfg.backend, cfg.path, cfg.dsn, 60.0)
    samples = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for k in range(0, len(msgs), cfg.batch_messages):
        blocks, events, _ = convert(msgs[k:k + cfg.batch_messages])
        store.write(blocks, events)
        samples += sum(b.n for b in blocks)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    store.close()
    rate = len(msgs) / seconds / assets  # messages per second of one twin
    print(f"{name} capacity: {len(msgs):,} messages ({samples:,} samples) in {wall:.2f} s wall, {cpu:.2f} s CPU "
          f"of this process: {samples / wall:,.0f} samples/s, {wall / len(msgs) * 1e6:.0f} µs wall and "
          f"{cpu / len(msgs) * 1e6:.0f} µs CPU per message; one twin (1 kHz, {rate:.0f} messages/s) costs its "
          f"writer {cpu / len(msgs) * rate:.1%} of a core (the database server's share not counted)")


def throughput(name: str, cfg: HistoryConfig, tpl: Any, assets: int, seconds: float) -> None:
    w = HistoryWriter(cfg)
    w.start()
    behind, lags = feed(w, tpl, assets, seconds)
    t_stop = time.perf_counter()
    while w.queue or (w.spool.pending() and not w.down):
        time.sleep(0.05)
    drain = time.perf_counter() - t_stop
    st = w.status()
    w.close()
    lag = np.array(lags[4:] or [0.0])
    print(f"{name}: {assets} assets × 1 kHz for {seconds:g} s: {st['samples'] / seconds:,.0f} samples/s in "
          f"{st['blocks'] / seconds:,.0f} blocks (rows)/s "
          f"({(st['written'] + st['replayed']) / seconds:,.0f} messages/s, "
          f"batches of {cfg.batch_messages}); lag p50 "
          f"{np.percentile(lag, 50) * 1e3:.0f} ms, p99 {np.percentile(lag, 99) * 1e3:.0f} ms, max "
          f"{st['lag_max_s'] * 1e3:.0f} ms; spooled {st['spooled']} (replayed {st['replayed']}); feeder "
          f"{behind * 1e3:.0f} ms behind; drained {drain:.2f} s after the stream; store errors {st['errors']}")


def query(name: str, cfg: HistoryConfig, hour: float, block: int) -> None:
    """``hour`` s of one asset, 32 channels, blocks of ``block`` samples (what one twin's writer
    stores per channel and ``batch_interval``); then one channel's whole range."""
    store = open_store(cfg.backend, cfg.path, cfg.dsn, 60.0)
    rng = np.random.default_rng(0)
    vals = [rng.normal(size=block).astype("<f8").tobytes() for _ in range(64)]
    channels = [f"c{k:02d}" for k in range(31)]
    t_fill = time.perf_counter()
    per_s = 1000 // block
    for s in range(int(hour)):
        starts = [s + j * block / 1000 for j in range(per_s)]
        parts = [np.array([x for m in range(block // 20) for x in (t0 + 0.02 * m, 20)], dtype="<f8").tobytes()
                 for t0 in starts]  # the writer's merged blocks keep each message's t0 and n
        blocks = [Block("q-01", ch, t0, 0.001, block, vals[(s + j + k) % 64], None, parts[j] if block > 20 else None)
                  for j, t0 in enumerate(starts) for k, ch in enumerate(["state.theta", *channels])]
        store.write(blocks, [])
    t_fill = time.perf_counter() - t_fill
    times = []
    for _ in range(3):
        t = time.perf_counter()
        ts, v, _ = store.query("q-01", "state.theta", -math.inf, math.inf)
        times.append(time.perf_counter() - t)
    store.close()
    print(f"{name}: query of one channel over {hour:g} s of one asset ({len(ts):,} samples of "
          f"{len(ts) * 32:,} stored, blocks of {block}): {min(times):.2f} s best of 3 "
          f"({', '.join(f'{x:.2f}' for x in times)}); "
          f"fill {t_fill:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--assets", type=int, default=20)
    ap.add_argument("--hour", type=float, default=3600.0)
    ap.add_argument("--dsn", default="host=127.0.0.1 port=5432 user=postgres dbname=postgres")
    ap.add_argument("--block", type=int, default=500,
                    help="samples per block in the query's store (500: one twin at 1 kHz, batch_interval 0.5 s)")
    ap.add_argument("--only", choices=("sqlite", "postgresql"))
    ap.add_argument("--batch", type=int, default=HistoryConfig().batch_messages,
                    help="[history] batch_messages (one twin publishes ~214 messages/s; the fleet 20 times that)")
    args = ap.parse_args()
    tpl = templates()
    with tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        if args.only != "postgresql":
            cfg = HistoryConfig(path=os.path.join(tmp, "h.sqlite"), batch_messages=args.batch)
            capacity("SQLite", HistoryConfig(path=os.path.join(tmp, "c.sqlite"), batch_messages=args.batch), tpl,
                     args.assets, args.seconds / 2)
            throughput("SQLite", cfg, tpl, args.assets, args.seconds)
            query("SQLite", HistoryConfig(path=os.path.join(tmp, "q.sqlite")), args.hour, args.block)
        if args.only != "sqlite":
            postgres(args, tpl, tmp)


def postgres(args: argparse.Namespace, tpl: Any, tmp: str) -> None:
    import psycopg
    from psycopg.conninfo import make_conninfo

    admin = psycopg.connect(args.dsn, autocommit=True)
    name = f"bench_history_{uuid.uuid4().hex[:8]}"
    admin.execute(f"CREATE DATABASE {name}")
    try:
        dsn = make_conninfo(args.dsn, dbname=name)
        cfg = HistoryConfig(backend="postgresql", dsn=dsn, spool_dir=os.path.join(tmp, "spool"),
                            batch_messages=args.batch)
        capacity("PostgreSQL", cfg, tpl, args.assets, args.seconds / 2)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE blocks, events")
        throughput("PostgreSQL", cfg, tpl, args.assets, args.seconds)
        query("PostgreSQL", cfg, args.hour, args.block)
    finally:
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))
        admin.execute(f"DROP DATABASE {name}")
        admin.close()


if __name__ == "__main__":
    main()
