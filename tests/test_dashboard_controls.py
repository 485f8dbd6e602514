"""The dashboard on a mechanism other than the slider crank (the packaged driven pendulum, with its
own channel names: examples/rigs) and with commands enabled, in a real headless browser: every
virtual sensor and the torque estimate are charted, re-initialisations are marked with their
reason, the threshold alarm's minimum duration is explained, the mechanism panel fits the
pendulum's reach, and the reset / set-parameter controls reach the twin through its MQTT command
path (counted by the twin's command gate) — refused when the request is not JSON or comes from
another site. The controls' absence without enabled commands: tests/test_dashboard.py."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from test_dashboard import CHROMIUM, FLAGS, _chromium, _get, _post, _wait

from mbsd_twin.demo.procs import free_port
from mbsd_twin.demo.rig import RigThread
from mbsd_twin.rig.faults import parse_fault
from mbsd_twin.rig.file import load_rig_file
from mbsd_twin.twin.config.file import load_config

RIG = load_rig_file("examples/rigs/pendulum_rig.toml")
TWIN = "examples/rigs/pendulum_twin.toml"


def _page_state(page: Any) -> dict[str, Any]:
    return page.evaluate("""() => {
      const cv = document.getElementById('mechanism'), d = window.dashboard;
      const virt = Object.keys(d.cols).filter((c) => c.startsWith('virt.')).map((c) => c.slice(5));
      const ids = [...document.querySelectorAll('#virtual-cards canvas')].map((c) => c.id);
      return {virt, plotted: d.virtualPlotted, drawn: d.drawn, ids, marks: d.marks, box: d.mechanismBox,
              w: cv.clientWidth, h: cv.clientHeight, note: document.getElementById('note-resid-angle').innerText,
              controls: !document.getElementById('controls').hidden,
              options: [...document.querySelectorAll('#ctl-param option')].map((o) => o.value)};
    }""")


def _command(page: Any, button: str) -> dict[str, Any]:
    page.evaluate("window.dashboard.lastReply = null")
    page.click(button)
    page.wait_for_function("window.dashboard.lastReply !== null", timeout=20000)
    return dict(page.evaluate("window.dashboard.lastReply"))


def test_pendulum_dashboard_with_controls(broker: Any, tmp_path: Any) -> None:
    _chromium()
    from playwright.sync_api import sync_playwright

    from mbsd_twin.twin.service import TwinService

    port = free_port()
    cfg = load_config(TWIN, env={}, overrides={"broker": {"url": broker.url, "protocol": broker.protocol},
                                               "metrics": {"port": port},
                                               "commands": {"enabled": ["status", "reset", "set_param"]}})
    addr = f"127.0.0.1:{port}"
    rig_cfg = dataclasses.replace(RIG.config, faults=(parse_fault("input_bias@4.0:motor_torque+0.3"),))
    with TwinService(cfg) as svc:
        assert svc.connected.wait(15)
        rig = RigThread(svc.mech, rig_cfg, broker.url, 40.0, 0.0, protocol=broker.protocol)
        rig.start()
        try:
            conf = json.loads(_get(addr, "/dashboard/api/config")[2])
            assert conf["controls"] == ["reset", "set_param"] and conf["alarms"][0]["min_duration"] == 0.05
            assert {"name": "bar.mass", "unit": "kg", "value": 1.0} in conf["parameters"]
            # a request that is not JSON, or comes from another site, is refused before anything is sent
            assert _post(addr, "/dashboard/api/cmd/reset", {}, {"Content-Type": "text/plain"})[0] == 400
            code, body = _post(addr, "/dashboard/api/cmd/reset", {}, {"Origin": "http://evil.example"})
            assert code == 400 and "another site" in body["detail"]
            assert _post(addr, "/dashboard/api/cmd/pause", {})[0] == 404  # not offered
            assert svc.health()["counters"]["commands"].get("run", 0) == 0
            _browse(addr, svc, sync_playwright, str(tmp_path / "pendulum-dashboard.png"))
        finally:
            rig.stop()
            rig.join(5)


def _browse(addr: str, svc: Any, sync_playwright: Any, shot: str = "") -> None:
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1300})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"http://{addr}/dashboard/")
            page.wait_for_function("window.dashboard && window.dashboard.rows > 200 && dashboard.virtualPlotted.length"
                                   " && dashboard.mechanismBox", timeout=40000)
            page.wait_for_timeout(700)
            st = _page_state(page)
            if shot:
                page.screenshot(path=shot, full_page=True)
            page.fill("#ctl-user", "operator")
            page.select_option("#ctl-param", "bar.mass")
            page.fill("#ctl-value", "1.2")
            set_reply = _command(page, "#ctl-set-btn")
            reset_reply = _command(page, "#ctl-reset-btn")
            shown = page.inner_text("#ctl-reply")
        finally:
            browser.close()
    assert not errors, errors
    # every virtual sensor is charted: the pivot's reactions, the measured torque and its estimate ±σ
    assert sorted(st["plotted"]) == sorted(st["virt"])
    assert {"pivot.fx", "pivot.fy", "motor_torque", "motor_torque.estimate", "motor_torque.estimate_sd"} \
        <= set(st["virt"])
    assert all(st["drawn"][cid] > 100 for cid in st["ids"]), st["drawn"]
    assert st["drawn"]["chart-torque"] > 100  # the Kalman torque estimate against the measured torque
    # the filter's start is marked with its reason on the time axes
    assert any(m["text"].startswith("re-initialised at t = 0.000 s: start") for m in st["marks"]["chart-angle"])
    assert "min_duration = 0.05 s" in st["note"] and "crossing(s) of 0.01" in st["note"]
    # the panel fits the pendulum's reach — its sketch runs from the pin to the centre of mass, 0.25 m, and
    # the bar turns all the way round — its height from the box's aspect (square here, wide for the slider crank)
    x0, x1, y0, y1 = st["box"]
    assert x0 <= -0.25 and x1 >= 0.25 and y0 <= -0.25 and y1 >= 0.25 and (y1 - y0) == pytest.approx(x1 - x0, rel=0.1)
    assert st["h"] == pytest.approx(min(600, st["w"] * (y1 - y0) / (x1 - x0)), abs=2)
    # the controls went through the twin's command gate over MQTT (run, answered on the response topic)
    assert st["controls"] and "bar.mass" in st["options"] and "solver.rtol" in st["options"]
    assert set_reply["ok"] is True and set_reply["cmd"] == "set_param" and "1.2" in set_reply["detail"], set_reply
    assert reset_reply["ok"] is True and reset_reply["cmd"] == "reset" and shown.startswith("reset: done")
    assert _wait(lambda: svc.health()["counters"]["commands"].get("run", 0) == 2, 5), svc.health()["counters"]
    assert svc.core.tracker.params == {"bar.mass": 1.2}
