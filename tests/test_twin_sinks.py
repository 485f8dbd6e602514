"""Storage faults: the recording sink suspends on a write failure, counts it, retries, and the live
twin keeps publishing (issue #15, item 5). Real failing paths: /dev/full (ENOSPC, also as root), a
directory where the recording or its next segment should be (EISDIR, also as root)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from test_twin_broker import MECH, Collector, _config, _wait

from mbsd_twin import load_mechanism
from mbsd_twin.rig.client import Rig
from mbsd_twin.rig.synthetic import RigConfig, Trajectory
from mbsd_twin.twin.ratelog import RateLimitedLog
from mbsd_twin.twin.recorder import read_records
from mbsd_twin.twin.service import TwinService
from mbsd_twin.twin.sinks import RecordingSink

HEADER = {"k": "header", "format": "x"}
needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full on this system")


@pytest.fixture(scope="module")
def traj() -> Trajectory:
    tr = Trajectory(load_mechanism(MECH), RigConfig())
    tr.samples(0, 3500)
    return tr


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@needs_dev_full
def test_dev_full_suspends_counts_and_retries_with_backoff() -> None:
    clock, events = Clock(), []
    sink = RecordingSink("/dev/full", 1 << 20, 0, HEADER, retry_min=1.0, retry_max=4.0,
                         report=lambda e, m: events.append((e, m)), clock=clock)
    sink({"k": "in", "p": "x"})
    sink.flush()  # the buffered header and record hit the full disk here
    st = sink.status()
    assert st["state"] == "suspended" and st["errors"] == 1 and "No space left" in st["last_error"]
    assert st["retry_in_s"] == pytest.approx(1.0) and events[0][0] == "suspended"
    for _ in range(5):
        sink({"k": "in", "p": "x"})  # dropped, not raised
    assert sink.status()["errors"] == 1 and sink.status()["dropped"] == 5
    waits = []
    for _ in range(4):  # each retry re-opens /dev/full, fails at once, and waits twice as long (up to 4 s)
        waits.append(sink.status()["retry_in_s"])
        clock.t += waits[-1]
        sink({"k": "in", "p": "x"})
    assert waits == [1.0, 2.0, 4.0, 4.0] and sink.status()["errors"] == 5
    sink.close()


def test_blocked_segment_suspends_then_resumes_with_a_gap_record(tmp_path: Any) -> None:
    path = str(tmp_path / "rec.jsonl")
    os.mkdir(path + ".0001")  # the next segment cannot be created (EISDIR, also as root)
    clock = Clock()
    sink = RecordingSink(path, 400, 0, HEADER, retry_min=0.5, clock=clock)
    for i in range(20):
        sink({"k": "cmd", "name": "x" * 40, "args": {"i": i}})
        sink.flush()
    st = sink.status()
    assert st["state"] == "suspended" and st["errors"] == 1 and "Is a directory" in st["last_error"]
    assert st["dropped"] > 0
    os.rmdir(path + ".0001")
    clock.t += 1.0
    sink({"k": "cmd", "name": "after", "args": {}})
    assert sink.status()["state"] == "ok"
    sink.close()
    assert sink.status()["state"] == "closed"
    recs = list(read_records(path))
    kinds = [r["k"] for r in recs]
    assert kinds[0] == "header" and kinds.count("gap") == 1 and recs[-1]["name"] == "after"
    gap = recs[kinds.index("gap")]
    assert gap["lost"] == st["dropped"] and "Is a directory" in gap["error"]


def test_removed_directory_suspends_at_rotation_and_resumes_when_it_is_back(tmp_path: Any) -> None:
    """Writes to an open file go on after its directory is removed (Linux); the next segment
    cannot be created (ENOENT): suspended until the directory exists again."""
    d = tmp_path / "rec"
    d.mkdir()
    path = str(d / "rec.jsonl")
    clock = Clock()
    sink = RecordingSink(path, 300, 0, HEADER, retry_min=0.5, clock=clock)
    sink.flush()
    shutil.rmtree(d)
    for i in range(10):
        sink({"k": "cmd", "name": "x" * 40, "args": {"i": i}})
        sink.flush()
    st = sink.status()
    assert st["state"] == "suspended" and "No such file or directory" in st["last_error"] and st["dropped"] > 0
    clock.t += 1.0
    sink({"k": "cmd", "name": "lost", "args": {}})  # the retry fails again: still no directory
    assert sink.status()["state"] == "suspended" and sink.status()["errors"] == 2
    d.mkdir()
    clock.t += 2.0
    sink({"k": "cmd", "name": "after", "args": {}})
    sink.close()
    text = Path(f"{path}.{sink.segment:04d}").read_text()
    segment = [json.loads(x) for x in text.split("\n") if x.strip()]
    assert [r["k"] for r in segment] == ["gap", "cmd"] and segment[0]["lost"] == st["dropped"] + 1


def test_recording_path_blocked_at_start_writes_the_header_on_resume(tmp_path: Any) -> None:
    path = tmp_path / "rec.jsonl"
    path.mkdir()
    clock = Clock()
    sink = RecordingSink(str(path), 1 << 20, 0, HEADER, clock=clock)
    sink({"k": "in", "p": "lost"})
    assert sink.status()["state"] == "suspended" and sink.status()["dropped"] == 1
    path.rmdir()
    clock.t += 1.0
    sink({"k": "in", "p": "kept"})
    sink.close()
    assert [r["k"] for r in read_records(str(path))] == ["header", "in"]  # no gap before the header


def test_torn_line_reads_as_a_gap(tmp_path: Any) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text('{"k":"header"}\n{"k":"in","p":"ab\n{"k":"gap","lost":3}\n')
    assert [r["k"] for r in read_records(str(path))] == ["header", "gap", "gap"]


def test_rate_limited_log_counts_what_it_left_out(caplog: Any) -> None:
    rl = RateLimitedLog(period=0.2)
    with caplog.at_level(logging.WARNING, logger="mbsd_twin.twin"):
        for _ in range(50):
            rl.warning("k", "problem")
        time.sleep(0.25)
        rl.warning("k", "problem")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["problem", "problem (49 more like this in the last 0.2 s not logged)"]


def _states_and_health(broker: Any, tmp_path: Any, traj: Trajectory, record: dict[str, Any],
                       during: Any = None) -> tuple[list[Any], dict[str, Any], list[Any]]:
    col = Collector(broker.url, broker.mqtt5)
    cfg = _config(broker, tmp_path, record=record, service={"health_interval": 0.2})
    with TwinService(cfg) as svc:
        assert _wait(svc.connected.is_set, 5)
        rig = Rig(svc.mech, RigConfig(), broker.url, traj=traj, protocol=broker.protocol)
        rig.run(1.5)
        if during:
            during()
        rig.run(1.5, seq0=75)
        _wait(lambda: not svc.batches, 10)
        time.sleep(0.5)
        health = svc.health()
    col.close()
    return col.get("twin/state"), health, col.get("twin/health")


# slow: a real-time twin through a broker; failed beside the parallel suite on a slow 2-core machine
# (this stop's CI run)
@pytest.mark.slow
@needs_dev_full
def test_service_keeps_publishing_with_the_recording_on_dev_full(broker: Any, tmp_path: Any,
                                                                  traj: Trajectory) -> None:
    states, health, published = _states_and_health(broker, tmp_path, traj,
                                                    {"path": "/dev/full", "retry_min": 0.2, "retry_max": 0.4})
    rec = health["sinks"]["recording"]
    print("recording sink", rec, "states", len(states))
    assert len(states) >= 120 and max(m["src_seq"][0] for m in states) >= 140  # 150 sent; margin for load
    assert rec["state"] == "suspended" and rec["errors"] >= 2 and rec["dropped"] > 100
    assert "No space left" in rec["last_error"]
    assert published and published[-1]["sinks"]["recording"]["state"] == "suspended"
    assert health["counters"].get("internal_error", 0) == 0


# slow: a real-time twin through a broker; failed beside the parallel suite on a slow 2-core machine
# (this stop's CI run)
@pytest.mark.slow
def test_service_recording_resumes_when_the_path_is_freed(broker: Any, tmp_path: Any,
                                                          traj: Trajectory) -> None:
    path = tmp_path / "rec.jsonl"
    path.mkdir()  # opening the recording fails (EISDIR) until the directory goes
    states, health, _ = _states_and_health(broker, tmp_path, traj,
                                           {"path": str(path), "retry_min": 0.1, "retry_max": 0.2}, path.rmdir)
    rec = health["sinks"]["recording"]
    print("recording sink", rec, "states", len(states))
    # states: a loaded machine's twin may thin its outputs (hold levels); the recording is the point
    assert len(states) >= 60 and rec["state"] == "ok" and rec["errors"] >= 1 and rec["dropped"] > 0
    recs = list(read_records(str(path)))
    assert recs[0]["k"] == "header" and sum(r["k"] == "out" for r in recs) > 100
    assert json.dumps(health)  # the health message stays serialisable
