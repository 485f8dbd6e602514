"""The dashboard's history view: a twin with SQLite history serves any stored time range,
downsampled server-side to at most 2000 points per channel with min/max envelopes, and the page's
range picker plots it — in a real headless browser (Debian's Chromium, as tests/test_dashboard.py),
the plotted points checked against numpy on the data the history export reads."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_dashboard import CHROMIUM, FLAGS, _chromium, _get, _wait

from mbsd_twin.dashboard.history import downsample
from mbsd_twin.demo.procs import EmbeddedBroker, free_port
from mbsd_twin.demo.rig import RigThread
from mbsd_twin.demo.run import DemoOptions, twin_config
from mbsd_twin.rig.synthetic import RigConfig
from mbsd_twin.storage.history import export
from mbsd_twin.storage.history.rows import Block
from mbsd_twin.storage.history.stores import SqliteStore
from mbsd_twin.twin.config.sections import HistoryConfig

T0 = 1_700_000_000.0  # a past hour of 1 kHz, stored before the twin starts
SPIKES = (1234.567, 2000.0005, 3599.999)  # s after T0: single-sample spikes the envelope must keep


def _past_hour(path: Path) -> None:
    store = SqliteStore(str(path))
    rng = np.random.default_rng(7)
    for c, (name, with_sigma) in enumerate((("state.theta", False), ("estimates.piston.mass", True))):
        t = np.arange(3_600_000) * 1e-3
        v = np.sin(2 * np.pi * t / 60.0 + c) + 0.01 * rng.standard_normal(len(t))
        v[np.round(np.array(SPIKES) * 1000).astype(int)] = 5.0 + c
        v[1_000_000:1_000_050] = np.nan  # nulls published
        blocks = [Block("sc-01", name, T0 + k * 0.5, 1e-3, 500, v[k * 500:(k + 1) * 500].tobytes(),
                        np.full(500, 0.1 + c).tobytes() if with_sigma else None) for k in range(7200)]
        for i in range(0, len(blocks), 1200):
            store.write(blocks[i:i + 1200], [])
    store.close()


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str, str]]:
    from mbsd_twin.twin.service import TwinService

    path = tmp_path_factory.mktemp("history") / "h.sqlite"
    _past_hour(path)
    with EmbeddedBroker() as broker:
        port = free_port()
        cfg = twin_config(DemoOptions(), broker.url, port)
        cfg = dataclasses.replace(cfg, history=HistoryConfig(path=str(path)))
        with TwinService(cfg) as svc:
            assert svc.connected.wait(15)
            rig = RigThread(svc.mech, RigConfig(), broker.url, 4.0, 0.0)
            rig.start()
            rig.join(30)
            assert _wait(lambda: svc.history.status()["written"] > 100 and svc.history.status()["queue"] == 0, 20)
            yield svc, f"127.0.0.1:{port}", str(path)


def _api(addr: str, query: str) -> tuple[int, dict[str, Any]]:
    status, _, body = _get(addr, f"/dashboard/api/history{query}")
    return status, json.loads(body)


def _envelope(t: np.ndarray, v: np.ndarray, t_from: float, t_to: float, points: int) -> dict[str, np.ndarray]:
    """Per non-empty bucket of [t_from, t_to]: first time, min, max (NaN ignored), by np.*.at."""
    edges = np.linspace(t_from, t_to, points + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, points - 1)
    first, lo, hi = np.full(points, np.inf), np.full(points, np.inf), np.full(points, -np.inf)
    np.minimum.at(first, b, t)
    ok = np.isfinite(v)
    np.minimum.at(lo, b[ok], v[ok])
    np.maximum.at(hi, b[ok], v[ok])
    used = np.bincount(b, minlength=points) > 0
    return {"t": first[used], "min": np.where(np.isinf(lo), np.nan, lo)[used],
            "max": np.where(np.isinf(hi), np.nan, hi)[used]}


def test_history_api_names_bad_requests(twin: tuple[Any, str, str]) -> None:
    _, addr, _ = twin
    status, d = _api(addr, "")
    assert status == 200 and {"state.theta", "estimates.piston.mass", "residuals.theta"} <= set(d["channels"])
    units = d["units"]
    assert units["state.theta"] == units["residuals.theta"] == "rad" and units["estimates.piston.mass"] == "kg"
    assert d["units"]["virtual.main_bearing.fx"] == "N" and set(d["units"]) == set(d["channels"])
    assert d["span"][0] == T0 and d["span"][1] > time.time() - 3600  # the past hour and the twin's own data
    assert _api(addr, "?from=yesterday&to=1&channel=state.theta") == (400, {"error": (
        "from 'yesterday': expected seconds of rig time (e.g. 1767225600.5) or an ISO 8601 time "
        "(e.g. 2026-01-01T00:00:00Z)"), "parameter": "from"})
    status, d = _api(addr, f"?from={T0}&to={T0 + 1}&channel=state.nope")
    assert status == 400 and "channel 'state.nope'" in d["error"] and d["parameter"] == "channel"
    status, d = _api(addr, f"?from={T0}&to={T0 + 1}&channel=state.theta&points=5000")
    assert status == 400 and d == {"error": "points 5000: expected 1 to 2000 ([dashboard] history_points)",
                                   "parameter": "points", "bound": 2000}


def test_downsample_keeps_short_ranges_as_they_are() -> None:
    t = np.array([1.0, 2.0, 3.0])
    d = downsample(t, np.array([1.0, np.nan, 3.0]), np.full(3, np.nan), 0.0, 4.0, 2000)
    assert d["t"] == [1.0, 2.0, 3.0] and d["min"] == d["max"] == d["value"]


def test_range_picker_plots_the_stored_range(twin: tuple[Any, str, str], tmp_path: Path) -> None:
    _chromium()
    from playwright.sync_api import sync_playwright

    _, addr, path = twin
    lo, hi = T0 + 600.25, T0 + 3600.0  # 50 minutes of the past hour: 3.0 M samples per channel
    live = SqliteStore(path, create=False)  # read as the history export reads
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1300}, device_scale_factor=1)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://{addr}/dashboard/")
            page.wait_for_function("dashboard.history && dashboard.history.channels.length > 0", timeout=30000)
            boxes = (page.input_value("#hist-from"), page.input_value("#hist-to"))
            page.fill("#hist-from", repr(lo))
            page.fill("#hist-to", repr(hi))
            page.select_option("#hist-channel", ["estimates.piston.mass", "state.theta"])
            page.click("#hist-load")
            page.wait_for_function("dashboard.history.loads === 1", timeout=60000)
            got = page.evaluate("({data: dashboard.history.data, ms: dashboard.history.ms, "
                                "drawn: dashboard.history.drawn, error: dashboard.history.error, "
                                "charts: dashboard.history.charts, axes: dashboard.axes})")
            page.locator("#card-history").screenshot(path=str(tmp_path / "history.png"))
            # the twin's own live history: a second of state.theta, fewer samples than points, as stored
            t_live, v_live, _ = live.query("sc-01", "state.theta", -math.inf, math.inf)
            a = float(t_live[t_live > T0 + 3600][0])
            b = a + 1.0
            page.fill("#hist-from", repr(a))
            page.fill("#hist-to", repr(b))
            page.select_option("#hist-channel", ["state.theta"])
            page.click("#hist-load")
            page.wait_for_function("dashboard.history.loads === 2", timeout=30000)
            small = page.evaluate("dashboard.history.data.channels['state.theta']")
            one_chart = page.evaluate("[dashboard.history.charts, document.getElementById('chart-history-1')]")
        finally:
            browser.close()
    assert not errors and got["error"] is None, (errors, got["error"])
    _check_units_and_times(got, boxes, one_chart, _api(addr, "")[1]["span"])
    exported = export.query(live, "sc-01", ["estimates.piston.mass", "state.theta"], lo, hi)
    drawn = 0
    for name, t, v, _ in exported:
        c = got["data"]["channels"][name]
        env = _envelope(t, v, lo, hi, 2000)
        assert c["n"] == len(t) == 2_999_750 and len(c["t"]) == len(env["t"]) <= 2000
        np.testing.assert_array_equal(c["t"], env["t"])
        nan = lambda xs: np.array([math.nan if x is None else x for x in xs])  # noqa: E731
        np.testing.assert_array_equal(nan(c["min"]), env["min"], err_msg=name)
        np.testing.assert_array_equal(nan(c["max"]), env["max"], err_msg=name)
        spikes = {round(x - T0, 3) for x, m in zip(c["t"], c["max"], strict=True) if m is not None and m >= 5}
        assert len(spikes) == 3, (name, spikes)  # every single-sample spike kept by its bucket's max
        drawn += int(np.isfinite(nan(c["value"])).sum())
        if name == "estimates.piston.mass":
            np.testing.assert_allclose(c["sigma"], 1.1, rtol=1e-12)
    assert got["drawn"] == drawn > 3000
    sel = (t_live >= a) & (t_live <= b)
    assert small["n"] == sel.sum() <= 2000 and small["t"] == t_live[sel].tolist()
    assert small["value"] == small["min"] == small["max"] == v_live[sel].tolist()
    print(f"50 min of 2 channels at 1 kHz (6.0 M samples stored) fetched and plotted in {got['ms']:.0f} ms")
    live.close()


def _check_units_and_times(got: dict[str, Any], boxes: tuple[str, str], one_chart: list[Any],
                           span: list[float]) -> None:
    """One chart per unit (the mass in kg and the angle in rad never share an axis), the range boxes
    in ISO 8601 UTC covering what is stored, the time axis captioned with its UTC origin."""
    assert got["charts"] == [{"id": "chart-history", "unit": "kg", "channels": ["estimates.piston.mass"]},
                             {"id": "chart-history-1", "unit": "rad", "channels": ["state.theta"]}]
    for chart in got["charts"]:
        assert got["axes"][chart["id"]]["unit"] == chart["unit"]
        assert got["axes"][chart["id"]]["xlabel"] == "seconds since 2023-11-14 22:23:20.250 UTC"  # lo = T0 + 600.25 s
    assert span[0] == T0 and boxes[0] == "2023-11-14T22:13:20.000Z" and export.parse_time(boxes[0], "from") == T0
    assert boxes[1].endswith("Z") and span[1] <= export.parse_time(boxes[1], "to") < span[1] + 1e-3  # rounded up
    assert one_chart == [[{"id": "chart-history", "unit": "rad", "channels": ["state.theta"]}], None]
