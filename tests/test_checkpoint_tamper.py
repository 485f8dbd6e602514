"""Tampered checkpoint rows (issue 30 item 5): a row that parses but does not fit — every kind: a
value of another type at every key, an unknown key in every object, a missing key, a NaN at every
number, an array of another shape, the Simulator's own state tampered likewise — is refused whole
with an error naming the key, and the core is left exactly as built (the twin starts fresh); the
few changes that are legitimate (older formats without some parts) are applied and the twin runs on.
Through a real broker: a fleet twin given the row of the finding (``"stats": "owned"``) starts fresh,
says why in its birth and health, and publishes."""

from __future__ import annotations

import copy
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from conftest import Broker
from test_checkpoint import _batches
from test_fleet import wait_for

from mbsd_twin.fleet.config import AssetSpec, FleetSettings
from mbsd_twin.fleet.feed import FleetFeeder
from mbsd_twin.fleet.member import Member
from mbsd_twin.model.loader import bundled_slider_crank, load_mechanism
from mbsd_twin.rig.client import connect
from mbsd_twin.storage.checkpoint.check import CheckpointError
from mbsd_twin.storage.checkpoint.state import apply, capture
from mbsd_twin.storage.checkpoint.store import Checkpoint, CheckpointStore
from mbsd_twin.twin.config.sections import AlarmConfig, CoreConfig
from mbsd_twin.twin.core import TwinCore

MECH = load_mechanism(bundled_slider_crank())
CFG = CoreConfig(alarms=(AlarmConfig("theta_res", "theta", high=0.5, low=0.2),))
BATCHES = _batches(70)
SIM = "\x00sim"  # the path step into the Simulator's state (a JSON text inside the row)


@pytest.fixture(scope="module")
def row() -> dict[str, Any]:
    core = TwinCore(CFG, MECH)
    for b in BATCHES[:60]:
        core.step(b)
    data = json.loads(capture(core))
    assert data["changes"]["drift"] and data["alarms"]["state"] and data["est"]["lin"]  # every part filled
    data["sim"] = json.loads(data["sim"])
    return data


@pytest.fixture(scope="module")
def fresh() -> bytes:
    return capture(TwinCore(CFG, MECH))


def _encode(data: dict[str, Any]) -> bytes:
    return json.dumps({**data, "sim": json.dumps(data["sim"])} if "sim" in data else data).encode()


def _places(v: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) of the row; of a list only the first and the last item."""
    yield path, v
    if isinstance(v, dict) and "__ndarray__" not in v:
        for k, x in v.items():
            yield from _places(x, (*path, k))
    elif isinstance(v, list) and v:
        for i in sorted({0, len(v) - 1}):
            yield from _places(v[i], (*path, i))


def _set(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    for k in path[:-1]:
        data = data[k]
    data[path[-1]] = value


def _delete(data: dict[str, Any], path: tuple[Any, ...]) -> None:
    for k in path[:-1]:
        data = data[k]
    del data[path[-1]]


def _refused(data: dict[str, Any], fresh: bytes, key: str) -> str:
    """Applying ``data`` raises CheckpointError naming ``key``; the core is as built."""
    core = TwinCore(CFG, MECH)
    with pytest.raises(CheckpointError) as e:
        apply(core, _encode(data))
    assert key in str(e.value), (key, str(e.value))
    assert capture(core) == fresh, f"the refused row {key} changed the core"
    return str(e.value)


def _runs_on(data: dict[str, Any]) -> None:
    """``data`` was applied: the twin goes on publishing states."""
    core = TwinCore(CFG, MECH)
    apply(core, _encode(data))
    outs = [o for b in BATCHES[60:] for o in core.step(b)]
    assert sum(o.topic.endswith("/state") for o in outs) == len(BATCHES) - 60, "mute after a restore"


def test_the_finding_stats_owned_is_refused(row: dict[str, Any], fresh: bytes) -> None:
    data = copy.deepcopy(row)
    data["core"]["stats"] = "owned"
    assert _refused(data, fresh, "core.stats") == "checkpoint key core.stats: unknown key"


def test_a_value_of_another_type_anywhere_is_refused(row: dict[str, Any], fresh: bytes) -> None:
    """Each scalar of the row (and of the Simulator's state in it) replaced by an object."""
    n = 0
    for path, v in _places(row):
        if isinstance(v, dict | list) or path == ("format",):
            continue
        data = copy.deepcopy(row)
        _set(data, path, {"owned": 1})
        _refused(data, fresh, str(path[-1]) if not isinstance(path[-1], int) else f"[{path[-1]}]")
        n += 1
    assert n > 80


def test_an_unknown_key_in_any_object_is_refused(row: dict[str, Any], fresh: bytes) -> None:
    n = 0
    for path, v in _places(row):
        if not isinstance(v, dict) or "__ndarray__" in v:
            continue
        data = copy.deepcopy(row)
        _set(data, (*path, "owned"), "owned")
        _refused(data, fresh, "owned")
        n += 1
    assert n > 20


OPTIONAL = {("timing",),  # checkpoints before 2026-11-27 (their time base anchors at the next batch)
            ("est", "lin", "B")}  # and before the gaps' input effects, or any of them (the next linearisation has them)
FREE = (("sim", "overrides"), ("core", "good_params"), ("core", "last_meas"),  # names that may be absent, and
        ("core", "prev_inputs"), ("est", "inputs"))  # sets of inputs that are empty before the first batch


def test_a_missing_key_is_refused_or_the_twin_runs_on(row: dict[str, Any], fresh: bytes) -> None:
    """Every key of a fixed set (the core's, the filter's, the Simulator's, …) missing: refused. A
    name of a free set missing (an output counter, an alarm's timer) or a part older formats lack:
    applied, and the twin goes on publishing."""
    refused = applied = 0
    for path, _ in _places(row):
        if not path or isinstance(path[-1], int) or path == ("format",):
            continue
        data = copy.deepcopy(row)
        _delete(data, path)
        core = TwinCore(CFG, MECH)
        try:
            apply(core, _encode(data))
        except ValueError as exc:
            assert capture(core) == fresh or not isinstance(exc, CheckpointError)
            refused += 1
            continue
        assert any(path[:len(o)] == o for o in OPTIONAL) or path[0] in ("out_seq", "alarms", "changes", "timing") \
            or path[:2] in FREE, path
        _runs_on(data)
        applied += 1
    assert refused > 50 and applied > 5


def test_older_formats_apply_without_their_missing_parts(row: dict[str, Any], fresh: bytes) -> None:
    """Format 2 has no drift tests or rate windows, format 1 no change tests or alarm timers: such
    rows are applied and the twin runs on; the same parts missing from a format-3 row are refused."""
    two = copy.deepcopy(row)
    del two["changes"]["drift"], two["changes"]["rates"]
    _refused(two, fresh, "changes.drift")
    two["format"] = "mbsd-twin-checkpoint/2"
    _runs_on(two)
    one = copy.deepcopy(row)
    del one["alarms"], one["changes"]
    _refused(one, fresh, "alarms")
    one["format"] = "mbsd-twin-checkpoint/1"
    _runs_on(one)


def test_a_nan_at_any_number_is_refused(row: dict[str, Any], fresh: bytes) -> None:
    """NaN (which JSON parsers accept) at every number, arrays included; only the drift tests' block
    length and threshold are NaN by design (before their first block) and may be."""
    n = 0
    for path, v in _places(row):
        arr = isinstance(v, dict) and "__ndarray__" in v
        if not (arr or isinstance(v, float | int) and not isinstance(v, bool)):
            continue
        data = copy.deepcopy(row)
        if arr:
            flat = _set_first(data, path)
            assert flat
        else:
            _set(data, path, math.nan)
        if path[:2] == ("changes", "drift") and path[-1] in (0, 1) and len(path) == 4:
            _runs_on(data)
            continue
        _refused(data, fresh, str(path[-1]) if not isinstance(path[-1], int) else f"[{path[-1]}]")
        n += 1
    assert n > 80


def _set_first(data: dict[str, Any], path: tuple[Any, ...]) -> bool:
    arr = data
    for k in path:
        arr = arr[k]
    flat = arr["__ndarray__"]
    while isinstance(flat, list) and flat and isinstance(flat[0], list):
        flat = flat[0]
    if flat:
        flat[0] = math.nan
    return bool(flat)


def test_an_array_of_another_shape_is_refused(row: dict[str, Any], fresh: bytes) -> None:
    n = 0
    for path, v in _places(row):
        if isinstance(v, dict) and "__ndarray__" in v:
            data = copy.deepcopy(row)
            a = data
            for k in path:
                a = a[k]
            a["__ndarray__"], a["shape"] = [a["__ndarray__"], a["__ndarray__"]], [2, *a["shape"]]
            _refused(data, fresh, str(path[-1]))
            n += 1
    data = copy.deepcopy(row)
    data["sim"]["stepper"]["S"].append(0.0)
    _refused(data, fresh, "sim.stepper.S")
    assert n >= 9


def test_settings_beyond_their_range_are_refused(row: dict[str, Any], fresh: bytes) -> None:
    for where, value, key in ((("core", "good_params"), {"piston.mass": -1.0}, "good_params.piston.mass"),
                              (("core", "good_params"), {"__class__": 1.0}, "good_params.__class__"),
                              (("sim", "overrides"), {"nope": 1.0}, "sim.overrides.nope"),
                              (("core", "hold"), 0, "core.hold"), (("nis",), [[-1.0, 4]], "nis[0][0]")):
        data = copy.deepcopy(row)
        _set(data, where, value)
        _refused(data, fresh, key)
    data = copy.deepcopy(row)
    data["sim"]["options"]["rtol"] = -1.0
    _refused(data, fresh, "sim.options")


def test_a_fleet_twin_given_the_tampered_row_starts_fresh_and_publishes(tmp_path: Path, broker: Broker,
                                                                         row: dict[str, Any]) -> None:
    """The finding through a real mosquitto: the store holds the row with ``"stats": "owned"``. The
    twin starts fresh, its birth says why (naming the key), its health counts it, and it publishes
    every batch's state (before: the row was applied key by key, the worker thread died at its first
    health message and the process stayed alive and mute)."""
    settings = FleetSettings(broker=broker.url, store=str(tmp_path / "cp.sqlite"), checkpoint_interval=60.0)
    spec = AssetSpec("a1", overrides={"service": {"health_interval": 0.3}})
    data = copy.deepcopy(row)
    data["core"]["stats"] = "owned"
    CheckpointStore(settings.store).save(Checkpoint("a1", 1.0, 1.2, "h", _encode(data)))
    seen: dict[str, list[dict[str, Any]]] = {"status": [], "state": [], "health": []}
    lock = threading.Lock()
    watch = connect(broker.url, "tamper-watch")

    def on(client: mqtt.Client, userdata: Any, msg: mqtt.MQTTMessage) -> None:
        with lock:
            seen[msg.topic.rsplit("/", 1)[1]].append(json.loads(msg.payload))
    watch.on_message = on
    watch.subscribe([("dt/v1/a1/twin/status", 1), ("dt/v1/a1/twin/state", 0), ("dt/v1/a1/twin/health", 0)])
    feeder = FleetFeeder(MECH, broker.url, ["a1"], rate=500.0, batch=10, duration=10.0).start()
    m = Member(spec, settings)
    try:
        m.start()
        wait_for("100 states", lambda: len(seen["state"]) >= 100, 60)
        wait_for("a health message after them", lambda: any(h["counters"]["batches"] >= 100 for h in seen["health"]),
                 10)
    finally:
        m.stop()
        feeder.stop()
        watch.loop_stop()
        watch.disconnect()
    birth = next(s for s in seen["status"] if s.get("state") == "online")
    assert birth["checkpoint_rejected"] == "CheckpointError: checkpoint key core.stats: unknown key"
    assert "restarted_from_checkpoint" not in birth
    h = seen["health"][-1]["counters"]
    assert h["checkpoint_rejected"] == 1 and h.get("internal_error", 0) == 0 and h.get("health_failed", 0) == 0


@pytest.mark.parametrize("column, value, why", [
    ("saved_at", "'owned'", "saved_at: expected a finite number, got 'owned'"),
    ("rig_time", "'owned'", "rig_time: expected a finite number, got 'owned'"),
    ("config_hash", "X'00'", "config_hash: expected a text, got b'\\x00'"),
    ("state", "1000000000000", "state: expected bytes, got int"),  # bytes(10**12): a terabyte
    ("state", "'{}'", "state: expected bytes, got str")])
def test_a_row_with_columns_of_other_types_is_rejected_at_once(tmp_path: Path, row: dict[str, Any], column: str,
                                                              value: str, why: str) -> None:
    """The store's own columns tampered with (SQLite keeps any type in any column): the twin starts
    fresh at once (no retries as for an unreachable store), says why and counts it."""
    import sqlite3

    settings = FleetSettings(broker="mqtt://127.0.0.1:1", store=str(tmp_path / "cp.sqlite"))
    CheckpointStore(settings.store).save(Checkpoint("a1", 1.0, 1.2, "h", _encode(row)))
    with sqlite3.connect(settings.store) as db:
        db.execute(f"UPDATE twin_checkpoints SET {column} = {value}")
    m = Member(AssetSpec("a1"), settings)  # resumes while it is built, before it connects
    assert m.resumed == {"checkpoint_rejected": f"checkpoint row of 'a1': {why}"}
    assert m.svc.counts["checkpoint_rejected"] == 1 and m.found
    m.store.close()
