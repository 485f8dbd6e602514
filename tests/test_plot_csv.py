"""``mbsd-twin plot`` on every CSV the project writes and on fmpy's: fmpy's own writer (quoted header)
on a built FMU, the twin's row CSV (the demo's twin.csv: ``t`` in Unix time), the history export
(long format, pivoted: the numbers drawn are the ones exported), unreadable files (the error names
the file and the line); and the FMU-against-native figure (every output, a panel each)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mbsd_twin as mt
from mbsd_twin.cli import main
from mbsd_twin.dashboard import Store
from mbsd_twin.dashboard.figures import base_units
from mbsd_twin.fmi.validation import ValidationReport, compare
from mbsd_twin.rig.synthetic import MessageSource, RigConfig, Trajectory
from mbsd_twin.storage.history import export
from mbsd_twin.storage.history.rows import Block
from mbsd_twin.storage.history.stores import SqliteStore
from mbsd_twin.twin.config.sections import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import encode, parse_sensor
from mbsd_twin.viz.compare import comparison_figure
from mbsd_twin.viz.plotting import default_columns, default_x, pyplot, read_csv, table_figure
from mbsd_twin.viz.units import column_units

MECH = "examples/mechanisms/slider_crank.toml"
T0 = 1_767_225_600.0  # 2026-01-01 00:00:00 UTC


@pytest.fixture(scope="module")
def fmpy_csv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """A built FMU simulated by fmpy (in a subprocess: PythonFMU can abort its importer at exit) and
    its result written by fmpy's own CSV writer."""
    pytest.importorskip("pythonfmu")
    pytest.importorskip("fmpy")
    from fmu_harness import run_script, shared_fmu

    tmp = tmp_path_factory.mktemp("fmpy")
    fmu, csv = shared_fmu(tmp_path_factory, "pythonfmu2", tmp / "SliderCrank.fmu"), tmp / "fmpy.csv"
    info = run_script(tmp, """
        import json, os
        import fmpy
        from fmpy.util import write_csv
        res = fmpy.simulate_fmu({fmu!r}, stop_time=0.5, output_interval=0.01, start_values={{"motor_torque": 2.0}})
        write_csv({csv!r}, res)
        print(json.dumps({{"rows": len(res), "names": list(res.dtype.names)}}), flush=True)
        os._exit(0)
        """, fmu=str(fmu), csv=str(csv))
    return csv, fmu, info


def _ylabels(fig: Any) -> list[str]:
    return [a.get_ylabel() for a in fig.axes]


def test_fmpy_csv(fmpy_csv: tuple[Path, Path, dict[str, Any]], tmp_path: Path) -> None:
    from fmpy.util import read_csv as fmpy_read_csv

    csv, fmu, info = fmpy_csv
    assert csv.read_text().startswith('"time","')  # fmpy quotes the names of its header
    tab, ref = read_csv(csv), fmpy_read_csv(csv)
    assert tab.columns == list(ref.dtype.names) == info["names"] and len(tab) == info["rows"] == 51
    for name in tab.columns:
        np.testing.assert_array_equal(tab[name], ref[name], err_msg=name)
    assert np.ptp(tab["crank.theta"]) > 0.01  # the motor torque turned the crank
    png = tmp_path / "fmpy.png"
    assert main(["plot", str(csv), "--units", str(fmu), "--columns", "crank.theta,main_bearing.*", "-o", str(png)]) == 0
    assert png.stat().st_size > 10_000
    tab.units = column_units(fmu)(tab.columns)  # what --units reads from the model description
    fig = table_figure(tab, tab.select(["crank.theta", "main_bearing.*"]))
    try:
        assert _ylabels(fig) == ["angle [rad]", "force [N]"] and fig.axes[-1].get_xlabel() == "time [s]"
    finally:
        pyplot().close(fig)


def _twin_csv(path: Path) -> Path:
    """The demo's twin.csv: the twin core's outputs for five batches of the rig, joined per sample by
    the dashboard's store exactly as ``mbsd-twin demo`` does, the rig's clock in Unix time."""
    mech, cfg = mt.load_mechanism(MECH), CoreConfig()
    core = TwinCore(cfg, mech)
    src = MessageSource(Trajectory(mech, RigConfig()), epoch=T0)
    store = Store(list(cfg.compare), every_sample=True, estimates=cfg.estimator == "ekf",
                  units=base_units(mech, cfg.compare))
    for i in range(5):
        for out in core.step(parse_sensor(encode(src.message(i)).encode(), "sc-01", 1 << 20), 1):  # type: ignore[arg-type]
            store(out)
    return store.to_csv(path)


def test_twin_csv(tmp_path: Path) -> None:
    csv = _twin_csv(tmp_path / "twin.csv")
    assert csv.read_text().startswith("t,sim.theta,")
    assert main(["plot", str(csv), "-o", str(tmp_path / "twin.png")]) == 0
    tab = read_csv(csv)
    x = default_x(tab)
    names = default_columns(tab, x)
    assert x == "t" and {"sim.theta", "meas.theta", "resid.theta", "virt.main_bearing.fx"} <= set(names)
    fig = table_figure(tab, names, x)
    try:
        assert fig.axes[-1].get_xlabel() == "t: seconds since 2026-01-01 00:00:00.000 UTC [s]"
        assert _ylabels(fig)[0] == "angle [rad]" and "force [N]" in _ylabels(fig)
        line = fig.axes[0].get_lines()[0]
        assert line.get_label() == "sim.theta"
        np.testing.assert_array_equal(line.get_xdata(), tab["t"] - T0)  # the first sample at the epoch
        np.testing.assert_array_equal(line.get_ydata(), tab["sim.theta"])
        assert len(tab) == 100 and line.get_xdata()[-1] == pytest.approx(0.099, abs=1e-6)  # 5 x 20 at 1 kHz
    finally:
        pyplot().close(fig)


def _history_export(tmp: Path) -> tuple[Path, list[export.Series]]:
    """Two channels at different rates and offsets (a null among them), stored and exported by the
    project's own store and writer."""
    store = SqliteStore(str(tmp / "h.sqlite"))
    theta = np.sin(np.arange(100) * 0.05)
    theta[10] = np.nan  # published null
    mass = 1.8 + 0.001 * np.arange(50)
    store.write([Block("sc-01", "state.theta", T0, 1e-3, 100, theta.astype("<f8").tobytes(), None),
                 Block("sc-01", "estimates.piston.mass", T0 + 5e-4, 2e-3, 50, mass.astype("<f8").tobytes(),
                       np.full(50, 0.01).astype("<f8").tobytes())], [])
    series = export.query(store, "sc-01", ["state.theta", "estimates.piston.mass"], -np.inf, np.inf)
    out = tmp / "history.csv"
    export.export(series, "sc-01", "csv", str(out))
    store.close()
    return out, series


def test_history_export_is_pivoted(tmp_path: Path) -> None:
    csv, series = _history_export(tmp_path)
    assert csv.read_text().startswith("asset,channel,t,value,sigma\nsc-01,state.theta,")
    twin = tmp_path / "twin.toml"
    twin.write_text("# the defaults: the packaged slider crank, channels theta, omega, f_x, f_y\n")
    assert main(["plot", str(csv), "--units", str(twin), "-o", str(tmp_path / "history.png")]) == 0
    tab = read_csv(csv)
    assert tab.columns == ["t", "state.theta", "estimates.piston.mass"] and len(tab) == 150  # the union of times
    tab.units.update(column_units(twin)(tab.columns))
    fig = table_figure(tab, default_columns(tab, "t"), "t")
    try:
        assert _ylabels(fig) == ["angle [rad]", "mass [kg]"]  # one unit per axis
        assert fig.axes[-1].get_xlabel() == "t: seconds since 2026-01-01 00:00:00.000 UTC [s]"
        for ax, (name, t, value, _) in zip(fig.axes, series, strict=True):
            (line,) = ax.get_lines()
            assert line.get_label() == name
            np.testing.assert_array_equal(line.get_xdata(), t - T0)  # every exported sample, none added
            np.testing.assert_array_equal(line.get_ydata(), value)  # NaN (the null) where exported
    finally:
        pyplot().close(fig)


@pytest.mark.parametrize(("content", "message"), [
    (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", ": not a text CSV file (byte 0 is not UTF-8)"),
    (b"time,a\n0,1\n0.1,abc\n", ", line 3: column 'a' holds 'abc', not a number"),
    (b"time,a\n0,1,2\n", ", line 2: 3 values but 2 column names"),
    (b"asset,channel,t,value,sigma\nsc-01,state.theta,1.5\n", ", line 2: 3 values but 5 column names"),
    (b"time,a,a\n0,1,2\n", ": the header names column(s) 'a' more than once"),
    (b"", ": the first line must be the header row of column names"),
])
def test_unreadable_csv_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes,
                                       message: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    assert main(["plot", str(bad), "-o", str(tmp_path / "x.png")]) == 2
    assert f"mbsd-twin plot: error: {bad}{message}\n" == capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_missing_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", str(tmp_path / "nope.csv"), "-o", str(tmp_path / "x.png")]) == 2
    assert f"mbsd-twin plot: error: {tmp_path / 'nope.csv'}: cannot be read: No such file" in capsys.readouterr().err


def test_fmu_vs_native_figure() -> None:
    """Every output in a panel of its own with its unit and largest difference; an output beyond its
    band is titled so, in red."""
    res = mt.simulate(mt.load_mechanism(MECH), 0.2, 0.01, inputs={"motor_torque": 2.0})
    units = {c: res.units[c] for c in res.columns if c != "time"}
    native = {"time": res.time, **{c: res[c] for c in units}}
    fmu = {**native, "crank.theta": native["crank.theta"] + 1e-3}
    rep = ValidationReport("out/SliderCrank.fmu", fmu_result=fmu, native_result=native,
                           errors=compare(fmu, native, units))
    fig = comparison_figure(rep)
    try:
        shown = [a for a in fig.axes if a.get_visible()]
        assert len(shown) == len(units) > 20
        for ax, (name, unit) in zip(shown, units.items(), strict=True):
            assert ax.get_title().split("\n")[0] == name and ax.get_ylabel().endswith(f"[{unit}]"), name
            assert [ln.get_label() for ln in ax.get_lines()] == ["native solver", "FMU (fmpy)"]
        bad = next(a for a in shown if a.get_title().startswith("crank.theta\n"))
        assert bad.get_title() == "crank.theta\nmax |Δ| 0.001 rad OUT OF BAND"
        assert fig.get_suptitle() == (f"FMU (fmpy) vs native solver, SliderCrank.fmu: {len(units)} outputs, "
                                      f"{len(units) - 1}/{len(units)} within tolerance")
        cols = 4
        for k, ax in enumerate(shown):  # the lowest panel of every column names the time axis
            assert ax.get_xlabel() == ("time [s]" if k + cols >= len(shown) else "")
        fig.canvas.draw()
        (legend,) = fig.legends
        assert [t.get_text() for t in legend.get_texts()] == ["native solver", "FMU (fmpy)"]
        assert legend.get_window_extent().y1 <= min(a.get_tightbbox().y0 for a in shown)  # under the panels
        assert legend.get_window_extent().y1 < fig._suptitle.get_window_extent().y0  # not over the title
    finally:
        pyplot().close(fig)
