"""``mbsd-twin demo`` end to end in a subprocess: embedded broker, twin, rig, dashboard, FMU, report;
Ctrl-C; an external broker. Also the live view and the report helpers."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from mbsd_twin.dashboard.store import Store
from mbsd_twin.demo.live import LiveView, Snapshot, residual_rms
from mbsd_twin.demo.procs import EmbeddedBroker, alive, port_open
from mbsd_twin.demo.report import fault_table
from mbsd_twin.twin.core import Out

ROOT = Path(__file__).resolve().parents[1]


def _demo(*args: str) -> subprocess.Popen[str]:
    """The demo as a user starts it from a terminal: Ctrl-C (SIGINT) at its default disposition, also
    when the test run itself was started in the background, where the shell sets SIGINT to ignored
    and every child, Python included, inherits that (the demo then never sees a Ctrl-C)."""
    return subprocess.Popen([sys.executable, "-m", "mbsd_twin.cli", "demo", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _read_until(proc: subprocess.Popen[str], text: str, timeout: float) -> str:
    """The demo's output up to and including the line that contains ``text``."""
    assert proc.stdout is not None
    seen, t_end = "", time.monotonic() + timeout
    while text not in seen and time.monotonic() < t_end:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    assert text in seen, seen
    return seen


def _broker(out: str) -> tuple[int, int]:
    pid = int(re.search(r"broker process: pid (\d+)", out).group(1))  # type: ignore[union-attr]
    port = int(re.search(r"embedded amqtt on mqtt://127\.0\.0\.1:(\d+)", out).group(1))  # type: ignore[union-attr]
    return pid, port


def _table(summary: str, header: str) -> list[list[str]]:
    block = summary.split(header, 1)[1].split("\n\n", 1)[0]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in block.splitlines()[2:] if ln.startswith("|")]


def test_demo_end_to_end(tmp_path: Path) -> None:
    proc = _demo("--duration", "8", "--out", str(tmp_path / "rep"), "--fmu-stop", "1", "--live", "plain")
    out, _ = proc.communicate(timeout=240)
    print(out)
    assert proc.returncode == 0, out
    pid, port = _broker(out)
    assert not alive(pid) and not port_open("127.0.0.1", port)  # no orphan broker
    assert re.search(r"dashboard: http://127\.0\.0\.1:\d+/dashboard/", out)
    assert re.search(r"\[\s*\d+\.\d / 8 s\] rate [\d.]+/s", out)  # the plain live view
    rep = tmp_path / "rep"
    summary = (rep / "summary.md").read_text()
    assert summary in out  # printed
    for name in ("twin.csv", "twin.log", "health.json", "rig_manifest.json", "crank_angle.png", "residuals.png",
                 "bearing_reactions.png", "fmu_vs_native.png", "fmu/SliderCrank.fmu", "fmu/fmu.csv",
                 "fmu/native.csv", "fmu/errors.csv"):
        assert (rep / name).stat().st_size > 200, name
    for png in rep.glob("*.png"):
        assert min(Image.open(png).size) > 400, png
    rows = (rep / "twin.csv").read_text().splitlines()
    # ~1 kHz samples over 8 s minus faults; on a loaded 2-core machine the twin may shed load by its
    # documented degradation order, so only a floor of a quarter of the stream is asserted here
    assert len(rows) > 2000 and rows[0].startswith("t,sim.theta,")
    faults = _table(summary, "| fault counter |")
    assert faults and all(r[1] == r[2] for r in faults), faults  # every injected fault counted exactly
    assert sum(int(r[1]) for r in faults) >= 3
    resid = {r[0]: float(r[1]) for r in _table(summary, "| residual |")}
    # the filter's crank-angle innovations: the encoder noise (1 mrad) plus the prediction's own σ
    # (about 0.1 mrad), the hidden mass mismatch being estimated online
    assert 0.9e-3 < resid["theta"] < 2e-3
    assert "**PASS**" in summary and "22/22 outputs in band" in summary


def test_demo_ctrl_c(tmp_path: Path) -> None:
    proc = _demo("--duration", "120", "--out", str(tmp_path / "rep"), "--no-fmu", "--live", "plain")
    seen = _read_until(proc, "streaming the synthetic rig", 60)
    time.sleep(1.5)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=30)
    out = seen + rest
    print(out)
    assert proc.returncode == 130 and "interrupted" in out and time.monotonic() - t0 < 15
    pid, port = _broker(out)
    assert not alive(pid) and not port_open("127.0.0.1", port)
    assert not (tmp_path / "rep" / "summary.md").exists()


def test_demo_ctrl_c_during_the_fmu_phase(tmp_path: Path) -> None:
    """Ctrl-C while the FMU is being built/validated (fmpy runs in a child process) stops everything."""
    proc = _demo("--duration", "2", "--out", str(tmp_path / "rep"), "--fmu-stop", "30", "--live", "off")
    seen = _read_until(proc, "building the slider-crank FMU", 120)
    time.sleep(1.0)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    out = seen + rest
    print(out)
    assert proc.returncode == 130 and time.monotonic() - t0 < 20
    pid, port = _broker(out)
    assert not alive(pid) and not port_open("127.0.0.1", port)
    children = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert children == []  # no fmpy or broker child left behind


def test_demo_sigterm_before_streaming(tmp_path: Path) -> None:
    proc = _demo("--duration", "120", "--out", str(tmp_path / "rep"), "--no-fmu", "--live", "off")
    assert proc.stdout is not None
    seen = proc.stdout.readline() + proc.stdout.readline()  # "starting ..." and the broker pid
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=30)
    print(seen + rest)
    assert proc.returncode == 130
    pid = int(re.search(r"pid (\d+)", seen).group(1))  # type: ignore[union-attr]
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


def test_demo_with_given_broker(broker: Any, tmp_path: Path) -> None:
    proc = _demo("--broker", broker.url, "--duration", "4", "--out", str(tmp_path / "rep"), "--no-fmu",
                 "--live", "off", "--faults", "0")
    out, _ = proc.communicate(timeout=120)
    print(out)
    assert proc.returncode == 0, out
    assert f"broker: {broker.url} (given)" in out and "starting the embedded" not in out
    summary = (tmp_path / "rep" / "summary.md").read_text()
    assert "skipped (--no-fmu)" in summary and "| theta |" in summary
    assert all(r[1] == r[2] == "0" for r in _table(summary, "| fault counter |"))


def test_embedded_broker_stops() -> None:
    with EmbeddedBroker() as b:
        pid = b.pid
        assert pid and alive(pid) and port_open(b.host, b.port)
    assert not alive(pid) and not port_open(b.host, b.port)


def test_live_view_plain_and_rms() -> None:
    store = Store(["theta"], every_sample=True)
    state = '{"src_seq":[1,1],"t0":10.0,"dt":0.5,"n":4,"ch":{"theta":[0,0,0,0]}}'
    resid = '{"src_seq":[1,1],"t0":10.0,"dt":0.5,"n":4,"ch":{"theta":[3,-3,4,-4]}}'
    virt = '{"src_seq":[1,1],"t0":10.0,"dt":0.5,"n":4,"ch":{"a.fx":[1,2,3,4]}}'
    for leaf, text in (("state", state), ("residuals", resid), ("virtual", virt)):
        store(Out(f"dt/v1/sc-01/twin/{leaf}", text))
    assert residual_rms(store, 10.0) == {"theta": pytest.approx((50 / 4) ** 0.5)}
    assert residual_rms(store, 0.6) == {"theta": pytest.approx((32 / 2) ** 0.5)}  # t = 11.0 and 11.5
    buf = io.StringIO()
    view = LiveView("plain", buf, every=0.0)
    health = {"lag_s": 0.01, "queue_depth": 2, "hold": 5,
              "counters": {"received": 9, "invalid": {"json": 1}, "gap": 2, "resync": {"gap": 2}}}
    view.update(Snapshot(3.0, 30.0, 10, health, 49.5, {"theta": 0.004}, 1, ["crank"]))
    line = buf.getvalue()
    assert line.startswith("[  3.0 / 30 s] rate 49.5/s, lag/queue/hold 0.010 / 2 / 5, residual RMS theta 0.004")
    assert "alarms 1 / crank" in line and "invalid 1 {'json': 1}" in line


def test_fault_table() -> None:
    manifest = {"expected": {"gap": 2, "late": 1, "duplicate": 0, "reordered": 1, "invalid": {"json": 1}}}
    counters = {"gap": 2, "late": 1, "reordered": 1, "invalid": {"json": 1, "schema": 1}}
    assert fault_table(manifest, counters) == [("gap", 2, 2), ("late", 1, 1), ("duplicate", 0, 0),
                                               ("reordered", 1, 1), ("invalid.json", 1, 1), ("invalid.schema", 0, 1)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux only")
def test_broker_dies_with_a_killed_demo(tmp_path: Path) -> None:
    proc = _demo("--duration", "120", "--out", str(tmp_path / "rep"), "--no-fmu", "--live", "off")
    assert proc.stdout is not None
    seen = ""
    while "broker process" not in seen:
        seen += proc.stdout.readline()
    pid = int(re.search(r"pid (\d+)", seen).group(1))  # type: ignore[union-attr]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid)


def test_live_view_rich_table_keeps_brackets() -> None:
    buf = io.StringIO()
    view = LiveView("rich", buf)
    assert view.mode == "rich"
    view.update(Snapshot(1.0, 30.0, 5, {"counters": {"received": 5}}, 50.0, {"theta": 0.01}, 0, []))
    view.close()
    text = buf.getvalue()
    assert "rate [messages/s]" in text and "lag [s] / queue / hold" in text and "5 / 5" in text
