"""Fleet checkpoints (mbsd_twin.twin.checkpoint): a twin's state through bytes into a fresh core
continues bit-identically; the store keeps one row per asset; a checkpoint that does not fit is
refused with a reason and leaves the twin able to start fresh."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import free_port

from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.twin.checkpoint import Checkpointer, apply, capture
from mbsd_twin.twin.checkpoint_store import Checkpoint, CheckpointStore
from mbsd_twin.twin.config import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor
from mbsd_twin.twin.rig import RigConfig, stream


def _batches(n: int) -> list[SensorBatch]:
    out = []
    for m in stream(load_mechanism(bundled_slider_crank()), RigConfig(rate=500.0, batch=10), n * 10 / 500.0):
        b = parse_sensor(encode(m).encode(), "sc-01", 1 << 20)
        assert isinstance(b, SensorBatch)
        out.append(b)
    return out


def _no_cusum(d: Any) -> Any:
    """Without the change tests' statistics (``cusum.*``): they restart from zero after a resume."""
    if isinstance(d, dict):
        return {k: _no_cusum(v) for k, v in d.items() if not k.startswith("cusum.")}
    return d


def test_checkpoint_continues_bit_identically() -> None:
    mech = load_mechanism(bundled_slider_crank())
    batches = _batches(40)
    a = TwinCore(CoreConfig(), mech)
    for b in batches[:20]:
        a.step(b)
    blob = capture(a)
    b_core = TwinCore(CoreConfig(), mech)
    apply(b_core, blob)
    assert np.array_equal(a.tracker.est.x, b_core.tracker.est.x)  # type: ignore[union-attr]
    for b in batches[20:]:
        for x, y in zip(a.step(b), b_core.step(b), strict=True):
            assert x.topic == y.topic and _no_cusum(json.loads(x.payload)) == _no_cusum(json.loads(y.payload))
            if "cusum." not in x.payload:
                assert x.payload == y.payload, x.topic


def test_checkpoint_refused_when_it_does_not_fit() -> None:
    mech = load_mechanism(bundled_slider_crank())
    core = TwinCore(CoreConfig(estimator="open_loop"), mech)
    with pytest.raises(ValueError, match="another estimator"):
        apply(TwinCore(CoreConfig(), mech), capture(core))
    with pytest.raises(ValueError, match="not a mbsd-twin-checkpoint"):
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
