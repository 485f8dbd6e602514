"""``mbsd-twin demo`` end to end in a subprocess: embedded broker, twin, rig, dashboard, FMU, report;
Ctrl-C; an external broker. Also the live view and the report helpers."""

from __future__ import annotations

import io
import json
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
    # no injected rig fault: the residual figure below is the filter's floor (the default story, an
    # encoder slip and the alarm it raises, is test_demo_report_leads_with_the_findings's)
    proc = _demo("--duration", "8", "--out", str(tmp_path / "rep"), "--fmu-stop", "1", "--live", "plain",
                 "--inject", "none")
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
    # the default story: the hidden piston mass estimated, the encoder slip injected at 60 % of the run
    assert "| piston.mass [kg] |" in summary and "injected: none" in out
    for name in ("twin.csv", "twin.log", "health.json", "rig_manifest.json", "events.json", "findings.json",
                 "crank_angle.png", "residuals.png", "bearing_reactions.png", "fmu_vs_native.png",
                 "fmu/SliderCrank.fmu", "fmu/fmu.csv", "fmu/native.csv", "fmu/errors.csv"):
        assert (rep / name).stat().st_size > 200, name
    for png in rep.glob("*.png"):
        assert min(Image.open(png).size) > 400, png
    rows = (rep / "twin.csv").read_text().splitlines()
    assert rows[0].startswith("t,sim.theta,")
    # ~1 kHz samples over 8 s minus faults; on a slow or loaded 2-core machine the twin sheds load
    # by its documented degradation order (408-431 rows were seen at load 8-19), so the assertion is
    # that every sample of the stream is accounted for: published, solved at a coarser hold, coalesced,
    # dropped, lost or rejected, by the twin's own counters, with at most a full queue in flight at
    # the stop (the remainder); and that the twin published through the run (at least 200 rows)
    account = {r[0]: int(r[1]) for r in _table(summary, "| rig samples |")}
    # (the report counts the rows it read: 415 against twin.csv's 417 in one run, not yet explained)
    assert account["published by the twin (twin.csv rows)"] >= 200 and len(rows) - 1 >= 200
    assert 0 <= account["not accounted for (in flight at the stop)"] <= 50 * 20  # queue_size batches
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
    assert proc.returncode == 130 and time.monotonic() - t0 < 45  # 31.8 s once in a CI run beside other tests
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


# ------------------------------------------------------------------ what the twin found, anomalies
def _evidence_by_hand() -> Any:
    """A run drawn by hand (epoch 100 s, 1 kHz, 20 samples per batch, 50 batches): batches 0-4 and
    6-9 at hold 1, seq 5 dropped by the rig, seq 10-39 coalesced by the twin (its health counters
    say 30), seq 40-49 at hold 5; residual spikes at 0.804 s (-0.071, the first correction after
    the coalesced backlog) and 0.954 s (+0.05, an encoder slip injected at 0.95 s)."""
    import numpy as np

    from mbsd_twin.demo.anomalies import Evidence
    from mbsd_twin.demo.run import DEMO_ALARMS
    from mbsd_twin.viz.plotting import Table

    outputs, rows = [], []
    for seq in [*range(5), *range(6, 10), *range(40, 50)]:
        hold = 1 if seq < 40 else 5
        t0 = 100.0 + 0.02 * seq + (hold - 1) * 0.001
        n = 20 // hold
        outputs.append([seq, t0, t0 + (n - 1) * hold * 0.001, n, hold])
        rows += [(t0 + k * hold * 0.001, 1e-3 * (-1) ** k, 1.5, 0.2) for k in range(n)]
    data = np.array(rows)
    data[np.isclose(data[:, 0], 100.804, rtol=0, atol=1e-9), 1] = -0.071
    data[np.isclose(data[:, 0], 100.954, rtol=0, atol=1e-9), 1] = 0.05
    data[data[:, 0] >= 100.95, 2:] = (2.115, 0.017)  # the estimate after the slip: no identification
    tab = Table(["t", "resid.theta", "est.piston.mass", "est.piston.mass.sd"], data,
                {"t": "s", "resid.theta": "rad", "est.piston.mass": "kg", "est.piston.mass.sd": "kg"})
    health = [{"t": 100.099, "hold": 1, "lag_s": 0.01, "queue_depth": 0,
               "counters": {"coalesced": 0, "dropped_overload": 0, "gap": 0, "samples": 100}},
              {"t": 100.999, "hold": 5, "lag_s": 0.6, "queue_depth": 0,
               "counters": {"coalesced": 30, "dropped_overload": 30, "gap": 1, "samples": 380}}]
    events = {"outputs": outputs, "hold_changes": [{"from": 1, "to": 5, "t": 100.8}],
              "resyncs": [{"t": 100.0, "reason": "start"}, {"t": 100.8, "reason": "gap"}], "health": health,
              "alarms": [{"alarm": "change:theta", "event": "raised", "t": 100.954, "source": "change",
                          "channel": "theta", "kind": "channel", "onset": 100.954, "size": 0.05, "divergence": True},
                         {"alarm": "change:theta", "event": "cleared", "t": 100.999, "source": "change",
                          "channel": "theta"}]}
    manifest = {"epoch": 100.0, "rate": 1000.0, "batch": 20, "seq0": 0, "messages": 50, "faults": {"5": "drop"},
                "mismatch": {"piston.mass": 1.8}, "truth": {"piston.mass": {"hidden": 1.8, "model": 1.5}},
                "rig_faults": [{"effective": 0.95, "spec": "encoder_offset@0.95:theta+0.05"}]}
    service = {"lag_high": 0.25, "lag_low": 0.05, "lag_low_batches": 100, "max_lag": 0.5, "queue_size": 50,
               "max_gap": 0.5}
    return Evidence(events, manifest, tab, DEMO_ALARMS, service)


def test_findings_of_a_run_drawn_by_hand() -> None:
    from mbsd_twin.demo.findings import find, found_markdown

    f = find(_evidence_by_hand(), ["piston.mass"])
    got = [(a.kind, round(a.t0, 6), round(a.t1, 6)) for a in f.anomalies]
    assert got == [("reinit", 0.0, 0.0), ("lost", 0.099, 0.12), ("coalesced", 0.199, 0.804),
                   ("reinit", 0.8, 0.8), ("hold", 0.8, 0.999), ("spike", 0.804, 0.804), ("spike", 0.954, 0.954)]
    lost, coalesced, hold = f.anomalies[1], f.anomalies[2], f.anomalies[4]
    assert "seq 5:" in lost.what and "20 samples" in lost.what and "injected" in lost.why
    assert "seq 10–39: 30 batch(es), 600 samples, without output (30 coalesced, by the twin's counters)" \
        in coalesced.what
    assert "max_lag = 0.5 s" in coalesced.why
    assert "hold 1 → 5" in hold.what and "lag up to 0.600 s" in hold.what and "lag_high = 0.25 s" in hold.why
    first, second = f.anomalies[5], f.anomalies[6]
    assert "-0.071 rad" in first.what and "5.9× the alarm line" in first.what
    assert "first correction after the backlog coalesced (0.199–0.804 s)" in first.why
    assert "encoder_offset@0.95:theta+0.05 took effect at 0.950 s" in second.why
    # 50 messages of 20 samples: 220 published, 160 solved at hold 5 and not published, 600
    # coalesced, 20 lost: nothing left unaccounted
    assert [n for _, n, _ in f.samples] == [1000, 220, 160, 600, 0, 20, 0, 0]
    (alarm,) = f.alarms
    assert (alarm.alarm, round(alarm.t, 6), round(alarm.cleared or 0, 6)) == ("change:theta", 0.954, 0.999)
    assert alarm.cause.startswith("injected encoder_offset@0.95:theta+0.05")
    assert "(the filter diverged)" in alarm.quantity
    (est,) = f.estimates
    assert (est.value, est.sd, est.truth, est.inside) == (2.115, 0.017, 1.8, False)
    # identified before the slip took effect (0.95 s): the last row before it, 0.949 s (seq 47 at hold 5)
    (early,) = f.before_fault
    assert (early.value, early.sd, early.inside) == (1.5, 0.2, True) and early.t == pytest.approx(0.949, abs=1e-9)
    text = "\n".join(found_markdown(f))
    assert text.index("| identified before the fault |") < text.index("| estimated parameter |")
    assert "estimates at 0.949 s, just before the first injected fault" in text
    assert "| piston.mass [kg] | 1.50 ± 0.20 | 1.8 (model 1.5) | -0.30 (-1.5 σ) | yes |" in text
    assert "| piston.mass [kg] | 2.115 ± 0.017 | 1.8 (model 1.5) | +0.315 (+18.5 σ) | **no** |" in text


def test_output_gaps_split_by_the_counters_read_with_each_output() -> None:
    """The twin stalls in its first batch while the queue (50) overflows: seq 1-52 dropped, counted
    before batch 0's output; it then works off 53-56 and coalesces 57-105 (counted with the output
    of 106). Each gap gets the counts that end it, not those of the health interval."""
    import dataclasses

    from mbsd_twin.demo.anomalies import output_gaps

    ev = _evidence_by_hand()
    outs = [[q, 100 + 0.02 * q, 100.019 + 0.02 * q, 20, 1, 0, 52, 0] for q in (0, 53, 54, 55, 56)]
    outs.append([106, 102.12, 102.139, 20, 1, 49, 52, 0])
    ev = dataclasses.replace(ev, events={**ev.events, "outputs": outs}, manifest={**ev.manifest, "faults": {}})
    gaps = output_gaps(ev)
    assert [(g.kind, g.what.split(" without output ")[1]) for g in gaps] == [
        ("queue_full", "(52 dropped with the queue full, by the twin's counters)"),
        ("coalesced", "(49 coalesced, by the twin's counters)")]


def _spans(fig: Any, kind: str) -> list[tuple[float, float]]:
    """The x-ranges of the shaded spans of anomaly ``kind`` on the first axes."""
    return [(p.get_x(), p.get_x() + p.get_width()) for p in fig.axes[0].patches if p.get_gid() == f"anomaly:{kind}"]


def test_residual_plot_marks_the_anomalies() -> None:
    from mbsd_twin.demo.findings import find
    from mbsd_twin.demo.report import residual_figure
    from mbsd_twin.viz.plotting import pyplot

    ev = _evidence_by_hand()
    f = find(ev, ["piston.mass"])
    fig = residual_figure(ev.table["t"] - 100.0, ev.table, ev.alarms, f.anomalies)
    try:
        assert _spans(fig, "lost") == [pytest.approx((0.099, 0.12))]
        assert _spans(fig, "coalesced") == [pytest.approx((0.199, 0.804))]
        assert _spans(fig, "hold") == [pytest.approx((0.8, 0.999))]
        ax = fig.axes[0]
        reinit = sorted(ln.get_xdata()[0] for ln in ax.lines if ln.get_gid() == "anomaly:reinit")
        assert reinit == pytest.approx([0.0, 0.8])
        (rings,) = [ln for ln in ax.lines if ln.get_gid() == "anomaly:spike"]
        assert list(rings.get_xdata()) == pytest.approx([0.804, 0.954])
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        for label in ("lost on the way", "backlog coalesced", "coarser hold", "re-initialisation",
                      "residual above the alarm line"):
            assert legend.count(label) == 1, legend
        assert ax.get_ylabel() == "theta [rad]" and "[s]" in fig.axes[-1].get_xlabel()
    finally:
        pyplot().close(fig)


def test_demo_report_leads_with_the_findings(tmp_path: Path) -> None:
    """A short demo in this process, the twin told to step to a coarser hold whenever it has any lag
    (lag_high = 0: hold 5 at its first batch, 20 from its second on, for good) and never to skip a
    batch (a loaded machine only makes it lag), and an encoder slip of 0.05 rad injected at 1 s."""
    import numpy as np

    from mbsd_twin.demo.anomalies import Evidence
    from mbsd_twin.demo.findings import find
    from mbsd_twin.demo.report import residual_figure
    from mbsd_twin.demo.run import DEMO_ALARMS, DemoOptions, run_demo
    from mbsd_twin.rig.faults import RigFault
    from mbsd_twin.viz.plotting import pyplot, read_csv

    rep = tmp_path / "rep"
    opts = DemoOptions(duration=3.0, out=rep, fault_rate=0.0, fmu=False, live="off",
                       faults=(RigFault("encoder_offset", 1.0, "theta", 0.05),),
                       service={"lag_high": 0.0, "lag_low": 0.0, "max_lag": 1e3, "flood_lag": 1e3, "queue_size": 10**5})
    assert run_demo(opts) == 0
    summary = (rep / "summary.md").read_text()
    assert summary.index("## What the twin found") < summary.index("## Anomalies") < summary.index("## Run")
    tab = read_csv(rep / "twin.csv")
    manifest = json.loads((rep / "rig_manifest.json").read_text())
    # the estimates: twin.csv's last row with an estimate and its σ, as printed; the truth the rig hid
    ests = {r[0].split(" [")[0]: r for r in _table(summary, "| estimated parameter |")}
    for name in ("piston.mass", "motor_torque.bias"):
        row = ests[name]
        v, sd = tab[f"est.{name}"], tab[f"est.{name}.sd"]
        k = np.flatnonzero(np.isfinite(v) & np.isfinite(sd))[-1]
        shown, shown_sd = row[1].split(" ± ")
        ulp = 0.5 * 10.0 ** -len(shown.split(".")[1])
        assert abs(float(shown) - v[k]) <= ulp * 1.0001 and abs(float(shown_sd) - sd[k]) <= ulp * 1.0001
        truth = 1.8 if name == "piston.mass" else 0.0
        assert float(row[2].split()[0]) == truth
        assert row[4] == ("yes" if abs(v[k] - truth) <= 3 * sd[k] else "**no**")
    # identified while the rig was healthy: twin.csv's last estimate before the slip (1 s), as printed
    early = {r[0].split(" [")[0]: r for r in _table(summary, "| identified before the fault |")}
    before = np.flatnonzero(np.isfinite(tab["est.piston.mass"]) & (tab["t"] - manifest["epoch"] < 1.0))[-1]
    shown = early["piston.mass"][1].split(" ± ")[0]
    assert abs(float(shown) - tab["est.piston.mass"][before]) <= 0.5 * 10.0 ** -len(shown.split(".")[1]) * 1.0001
    assert summary.index("| identified before the fault |") < summary.index("| estimated parameter |")
    # the injected slip raised an alarm within one batch period (20 ms) of taking effect
    alarms = _table(summary, "| alarm |")
    caused = [r for r in alarms if r[5].startswith("injected encoder_offset@1.0:theta+0.05")]
    assert caused and 1.0 <= float(caused[0][1]) <= 1.0 + 0.02, alarms
    # the forced holds: the first batch solved at hold 5 (4 rows 5 ms apart), the rest at 20
    anomalies = _table(summary, "| # | anomaly |")
    holds = [r for r in anomalies if r[1] == "coarser hold"]
    assert [r[3].split(" at ")[0] for r in holds] == ["hold 1 → 5", "hold 5 → 20"], holds
    t = tab["t"] - manifest["epoch"]
    assert np.diff(t[:4]) == pytest.approx([0.005] * 3, abs=1e-6)  # ms-exact on an epoch of ~1.8e9 s
    assert round((t[4] - 0.019) / 0.02, 4) % 1 == 0  # the second batch's one output: its sample 19
    ev = Evidence(json.loads((rep / "events.json").read_text()), manifest, tab, DEMO_ALARMS, {})
    fig = residual_figure(t, tab, DEMO_ALARMS, find(ev, []).anomalies)
    try:
        # hold 5 from the first batch's first sample (its first output is sample 4) to the second
        # batch's first sample (its one output is sample 19), hold 20 from there to the last output
        assert _spans(fig, "hold") == [pytest.approx((t[0] - 0.004, t[4] - 0.019), abs=2e-6),
                                       pytest.approx((t[4] - 0.019, t[-1]), abs=2e-6)]
        assert "coarser hold" in [x.get_text() for x in fig.axes[0].get_legend().get_texts()]
    finally:
        pyplot().close(fig)
