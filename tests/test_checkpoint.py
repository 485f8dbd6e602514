"""Fleet checkpoints (mbsd_twin.storage.checkpoint.state): a twin's state through bytes into a fresh core
continues bit-identically; the store keeps one row per asset; a checkpoint that does not fit is
refused with a reason and leaves the twin able to start fresh."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import free_port

from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.faults import RigFault
from mbsd_twin.rig.file import load_rig_file
from mbsd_twin.rig.synthetic import RigConfig, Trajectory, stream
from mbsd_twin.storage.checkpoint.state import Checkpointer, apply, capture
from mbsd_twin.storage.checkpoint.store import Checkpoint, CheckpointStore
from mbsd_twin.storage.history.pg import PostgresStore
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor


def _batches(n: int) -> list[SensorBatch]:
    out = []
    for m in stream(load_mechanism(bundled_slider_crank()), RigConfig(rate=500.0, batch=10), n * 10 / 500.0):
        b = parse_sensor(encode(m).encode(), "sc-01", 1 << 20)
        assert isinstance(b, SensorBatch)
        out.append(b)
    return out


def test_checkpoint_continues_bit_identically() -> None:
    """Every output after the restore, the change statistics (``cusum.*``) included, is the same
    text as the uninterrupted twin's."""
    mech = load_mechanism(bundled_slider_crank())
    batches = _batches(40)
    a = TwinCore(CoreConfig(), mech)
    for b in batches[:20]:
        a.step(b)
    blob = capture(a)
    b_core = TwinCore(CoreConfig(), mech)
    apply(b_core, blob)
    assert np.array_equal(a.tracker.est.x, b_core.tracker.est.x)  # type: ignore[union-attr]
    sums = []
    for b in batches[20:]:
        for x, y in zip(a.step(b), b_core.step(b), strict=True):
            assert x.topic == y.topic and x.payload == y.payload, x.topic
            if x.topic.endswith("/estimates"):
                sums += [v for k, vs in json.loads(x.payload)["ch"].items() if k.startswith("cusum.") for v in vs]
    assert len(sums) == 20 * 10 * 6 and max(sums) > 1.0  # 6 statistics, 10 samples a batch; not all zero


PENDULUM_RIG = load_rig_file("examples/rigs/pendulum_rig.toml")
PENDULUM = load_mechanism(PENDULUM_RIG.mechanism)


def _pendulum_batches(bias: float, onset: float, duration: float) -> list[SensorBatch]:
    """The pendulum rig (examples/rigs) with an unmeasured torque ``bias`` [N·m] from ``onset`` s."""
    cfg = dataclasses.replace(PENDULUM_RIG.config, faults=(RigFault("input_bias", onset, "motor_torque", bias),))
    out = []
    for m in stream(Trajectory(PENDULUM, cfg), duration=duration):
        b = parse_sensor(encode(m).encode(), "pd-01", 1 << 22)
        assert isinstance(b, SensorBatch)
        out.append(b)
    return out


def _change_alarms(core: TwinCore, batches: list[SensorBatch]) -> list[tuple[str, float]]:
    return [(p["alarm"], p["t"]) for b in batches for o in core.step(b) if o.topic.endswith("/alarms")
            and (p := json.loads(o.payload))["event"] == "raised" and p["source"] == "change"]


def test_a_partly_accumulated_change_alarms_at_the_same_sample_after_a_restore() -> None:
    """A 0.03 N·m torque bias from 2.0 s on the pendulum: the checkpoint is taken after the last
    batch before the uninterrupted twin's first change alarm, with the alarming CUSUM more than
    half-way to its threshold. Restored from it, a new twin raises the same alarms at the same rig
    times; restored from the same checkpoint as format 1 (no change tests in it), the tests start
    fresh, re-arm after divergence_window and the alarm comes later."""
    cfg = load_config("examples/rigs/pendulum_twin.toml", env={}).core
    batches = _pendulum_batches(0.03, 2.0, 3.0)
    ref = TwinCore(cfg, PENDULUM)
    blobs, sums = [], []
    for b in batches:
        blobs.append(capture(ref))  # the state before batch i
        sums.append(ref.changes.detector.statistics() if ref.changes else {})
        if _change_alarms(ref, [b]):
            break
    k = len(blobs) - 1  # the alarm's batch
    first = _change_alarms(TwinCore(cfg, PENDULUM), batches)
    assert first and 2.0 <= first[0][1] < 2.05 and batches[k].t0 <= first[0][1] < batches[k + 1].t0
    name = first[0][0].removeprefix("change:")
    assert sums[k][name] > 0.5 * ref.changes.detector.h  # type: ignore[union-attr]  # mid-accumulation

    resumed = TwinCore(cfg, PENDULUM)
    apply(resumed, blobs[k])
    assert _change_alarms(resumed, batches[k:]) == [a for a in first if a[1] >= batches[k].t0]

    old = json.loads(blobs[k])
    del old["alarms"], old["changes"]
    old["format"] = "mbsd-twin-checkpoint/1"
    fresh = TwinCore(cfg, PENDULUM)
    apply(fresh, json.dumps(old).encode())
    later = _change_alarms(fresh, batches[k:])
    assert not later or later[0][1] >= batches[k].t0 + cfg.divergence_window > first[0][1]


def test_checkpoint_refused_when_it_does_not_fit() -> None:
    mech = load_mechanism(bundled_slider_crank())
    core = TwinCore(CoreConfig(estimator="open_loop"), mech)
    with pytest.raises(ValueError, match="another estimator"):
        apply(TwinCore(CoreConfig(), mech), capture(core))
    with pytest.raises(ValueError, match="not a mbsd-twin-checkpoint/3 or mbsd-twin-checkpoint/2 or "
                                         "mbsd-twin-checkpoint/1 checkpoint"):
        apply(core, b"{not json")


def test_store_keeps_the_last_per_asset(tmp_path: Path) -> None:
    s = CheckpointStore(str(tmp_path / "sub" / "cp.sqlite"))
    s.save(Checkpoint("a", 1.0, None, "h", b"one"))
    s.save(Checkpoint("a", 2.0, 3.5, "h", b"two"))
    s.save(Checkpoint("b", 1.5, 0.0, "g", b"x"))
    assert s.load("a") == Checkpoint("a", 2.0, 3.5, "h", b"two") and s.load("c") is None
    s.delete("a")
    assert s.load("a") is None and s.load("b") is not None
    s.close()


@pytest.fixture
def postgres() -> Iterator[str]:
    """A throw-away PostgreSQL server on a Unix socket in its own directory (as the ``postgres`` user
    when run as root: initdb refuses root)."""
    if not shutil.which("initdb") or not shutil.which("pg_ctl"):
        pytest.skip("PostgreSQL (initdb, pg_ctl) is not installed")
    d = Path(tempfile.mkdtemp(prefix="h19c_pg_"))
    d.chmod(0o755)
    as_user: list[str] = []
    if os.geteuid() == 0:
        pw = pwd.getpwnam("postgres")
        os.chown(d, pw.pw_uid, pw.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run([*as_user, "initdb", "-D", str(d / "data"), "-U", "postgres", "-A", "trust"], check=True,
                   capture_output=True, timeout=120)
    subprocess.run([*as_user, "pg_ctl", "-D", str(d / "data"), "-w", "-l", str(d / "log"), "-o",
                    f"-p {port} -k {d} -c listen_addresses=''", "start"], check=True, capture_output=True, timeout=60)
    try:
        yield f"postgresql://postgres@/postgres?host={d}&port={port}"
    finally:
        subprocess.run([*as_user, "pg_ctl", "-D", str(d / "data"), "-m", "immediate", "stop"], capture_output=True,
                       timeout=60)
        shutil.rmtree(d, ignore_errors=True)


def test_store_on_postgresql(postgres: str) -> None:
    s = CheckpointStore(postgres)
    s.save(Checkpoint("a", 1.0, None, "h", b"\x00one"))
    s.save(Checkpoint("a", 2.0, 3.5, "h", b"\x00two"))
    assert s.load("a") == Checkpoint("a", 2.0, 3.5, "h", b"\x00two") and s.load("b") is None
    s.close()


def _open_together(url: str) -> list[str]:
    """Eight sessions of the checkpoint store and eight of the history open ``url`` at one moment;
    what failed."""
    errors: list[str] = []
    gate = threading.Barrier(16)

    def checkpoint_store() -> None:
        s = CheckpointStore(url)
        gate.wait()
        try:
            assert s.load("a") is None
        except Exception as exc:
            errors.append(f"checkpoint store: {exc}")
        s.close()

    def history() -> None:
        h = PostgresStore(url)
        gate.wait()
        try:
            assert h.events("a") == []
        except Exception as exc:
            errors.append(f"history: {exc}")

    threads = [threading.Thread(target=f) for f in [checkpoint_store, history] * 8]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    return errors


def test_twins_starting_together_create_the_tables_once(postgres: str) -> None:
    """A fleet's twins open the checkpoint store and the history on one new database at the same
    moment. Without the schema lock, concurrent ``CREATE TABLE IF NOT EXISTS`` fails in all but one
    session (unique violation on pg_type; seen in 9 of 10 such starts), and a twin took that for
    an unreachable store. Eight sessions of each store on each of four new databases: none fails."""
    import psycopg

    for rep in range(4):
        with psycopg.connect(postgres, autocommit=True) as admin:
            admin.execute(f"CREATE DATABASE race{rep}")
        assert _open_together(postgres.replace("/postgres?", f"/race{rep}?")) == []


def test_unreachable_store_is_counted_and_never_shows_the_password(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    counts: Counter[str] = Counter()
    core = TwinCore(CoreConfig(), load_mechanism(bundled_slider_crank()))
    cp = Checkpointer(lambda: core, CheckpointStore(str(blocker / "cp.sqlite")), "a", "h", 1.0, counts)
    cp.save()  # a directory that cannot exist: counted, not raised
    assert counts["checkpoint_failed"] == 1 and str(blocker) in cp.last_error
    with pytest.raises(OSError) as e:
        CheckpointStore("postgresql://u:secret@127.0.0.1:1/db?connect_timeout=2").load("a")
    assert "secret" not in str(e.value) and "u:***@127.0.0.1:1" in str(e.value)
