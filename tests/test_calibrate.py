"""Offline calibration (mbsd_twin.estimation.calibrate, ``twin calibrate``): parameters hidden in the
synthetic rig are recovered from 10 s recordings, with standard errors consistent with the actual
error; the calibrated mechanism file keeps the user's layout and loads back; errors name the bad
parameter, file and line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from mbsd_twin.cli import main
from mbsd_twin.errors import PortError
from mbsd_twin.estimation.calibrate import calibrate, noise_estimate, shooting_segments
from mbsd_twin.estimation.holds import interval_steps
from mbsd_twin.estimation.mechfile import set_parameters, toml_value, write_mechanism
from mbsd_twin.model.loader import load_mechanism, loads_mechanism
from mbsd_twin.rig.recording import write_rig_recording
from mbsd_twin.rig.synthetic import MessageSource, RigConfig, Trajectory
from mbsd_twin.simulation.ports import apply_parameters, model_parameters
from mbsd_twin.simulation.simulator import Simulator
from mbsd_twin.solvers.dynamics import SolverOptions
from mbsd_twin.twin.calibration import calibrate_recording, read_recording
from mbsd_twin.twin.config.sections import CoreConfig
from mbsd_twin.twin.core import TwinCore
from mbsd_twin.twin.protocol import SensorBatch, encode, parse_sensor
from mbsd_twin.twin.recorder import FORMAT, Recorder, segments

MECH = str(Path(__file__).resolve().parents[1] / "examples" / "mechanisms" / "slider_crank.toml")
NOISE = {"theta": 1e-3, "omega": 0.01, "tau_m": 0.002, "f_x": 0.5, "f_y": 0.5}
NOMINAL_MASS, NOMINAL_FRICTION = 1.5, 0.05  # examples/mechanisms/slider_crank.toml


def rig_recording(factory: pytest.TempPathFactory, hidden: dict[str, float]) -> str:
    """A 10 s recording of the rig with ``hidden`` parameters (its torque ramps linearly between
    controller knots, which the default first-order hold reconstructs)."""
    path = str(factory.mktemp("calib") / "rig.jsonl")
    write_rig_recording(path, MECH, RigConfig(mismatch=hidden, noise=NOISE), 10.0)
    return path


@pytest.fixture(scope="module")
def mass_recording(tmp_path_factory: pytest.TempPathFactory) -> str:
    return rig_recording(tmp_path_factory, {"piston.mass": 1.2 * NOMINAL_MASS})


@pytest.fixture(scope="module")
def friction_recording(tmp_path_factory: pytest.TempPathFactory) -> str:
    return rig_recording(tmp_path_factory, {"main_bearing.viscous_friction": 1.3 * NOMINAL_FRICTION})


def check_recovered(value: float, stderr: float, truth: float) -> None:
    err = value - truth
    assert abs(err) < 0.01 * truth, f"{value} vs truth {truth}: {100 * err / truth:.2f} %"
    assert 0 < stderr < 0.01 * truth
    assert abs(err) < 4 * stderr, f"error {err:.3g} vs standard error {stderr:.3g}"


# ---------------------------------------------------------------- recovery
def test_piston_mass_recovered_with_consistent_standard_error(mass_recording: str) -> None:
    path = mass_recording
    cal, rec = calibrate_recording(path, ["piston.mass"])  # every compared channel: θ, ω, f_x, f_y
    assert len(rec.times) == 10000 and rec.duplicates == 0
    assert cal.success and cal.start[0] == NOMINAL_MASS and cal.segments == 20
    assert cal.residuals == 4 * 10000 // 5  # four channels, every 5th sample
    check_recovered(cal.values[0], cal.stderr[0], 1.2 * NOMINAL_MASS)
    # σ from the first pass's residuals is the rig's sensor noise, as is the model-free estimate
    # (second differences): no model error left
    outputs = {"theta": "crank.theta", "omega": "crank.omega", "f_x": "main_bearing.fx", "f_y": "main_bearing.fy"}
    assert cal.sigma_source == {o: "first-pass residuals" for o in outputs.values()}
    for ch, out in outputs.items():
        assert cal.sigma[out] == pytest.approx(NOISE[ch], rel=0.05)
        assert cal.noise_floor[out] == pytest.approx(NOISE[ch], rel=0.1)
    assert cal.reduced_chi2 == pytest.approx(1.0, abs=0.05)


def test_friction_recovered_from_a_wrong_start_with_given_noise(friction_recording: str) -> None:
    path = friction_recording
    truth = 1.3 * NOMINAL_FRICTION
    cal, _ = calibrate_recording(path, ["main_bearing.viscous_friction"], channels=["theta", "omega"],
                                 noise={"theta": NOISE["theta"], "omega": NOISE["omega"]},
                                 start={"main_bearing.viscous_friction": 0.3 * truth})
    assert cal.success and cal.passes == 1 and cal.start[0] == pytest.approx(0.3 * truth)
    assert set(cal.sigma_source.values()) == {"given"}
    check_recovered(cal.values[0], cal.stderr[0], truth)


def test_engine_fit_takes_plain_arrays_and_recovers_mass_from_a_wrong_start(mass_recording: str) -> None:
    """The engine function without a recording: arrays in, a 5 s window, mass started at twice
    the truth."""
    path = mass_recording
    rec = read_recording(path, ["theta", "omega"])
    w = rec.times <= 5.0
    cal = calibrate(load_mechanism(MECH), ["piston.mass"], rec.times[w], {"motor_torque": rec.channels["tau_m"][w]},
                    {"crank.theta": rec.channels["theta"][w], "crank.omega": rec.channels["omega"][w]},
                    noise={"crank.theta": NOISE["theta"], "crank.omega": NOISE["omega"]},
                    start={"piston.mass": 2.0 * 1.2 * NOMINAL_MASS})
    assert cal.success and cal.segments == 10
    check_recovered(cal.values[0], cal.stderr[0], 1.2 * NOMINAL_MASS)


# ---------------------------------------------------------------- CLI
def test_cli_prints_estimates_and_writes_a_loadable_calibrated_file(
        friction_recording: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = friction_recording
    out, report = tmp_path / "calibrated.toml", tmp_path / "report.json"
    rc = main(["twin", "calibrate", path, "--param", "main_bearing.viscous_friction", "--param", "piston.mass",
               "--channels", "theta,omega", "--t-end", "4", "--segment", "0.5",
               "-o", str(out), "--json", str(report), "--progress"])
    text, err = capsys.readouterr()
    assert rc == 0, text
    rep = json.loads(report.read_text())
    # --progress with stderr not a terminal: plain lines, the first at once, then at most one per 2 s
    lines = [ln for ln in err.splitlines() if ln.startswith("calibrate: ")]
    assert lines[0].startswith(f"calibrate: pass 1: model run 1 ({rep['segments']} segments) (")
    runs = [int(ln.split("model run ")[1].split()[0]) for ln in lines]
    assert runs == sorted(runs) and runs[-1] <= rep["evaluations"]
    est = {n: p["value"] for n, p in rep["parameters"].items()}
    sd = {n: p["stderr"] for n, p in rep["parameters"].items()}
    for name in est:  # the printed table row: name, start, estimate, standard error
        row = next(ln for ln in text.splitlines() if ln.startswith(name))
        assert f"{est[name]:.6g}" in row and f"{sd[name]:.3g}" in row
    assert "correlation:" in text and rep["t_end"] == 4.0 and "warning" not in text
    assert f"RMS residual {rep['rms']['crank.theta']:.4g}, sensor noise {rep['noise_floor']['crank.theta']:.4g}" in text
    corr = np.array(rep["correlation"])
    assert corr.shape == (2, 2) and np.allclose(np.diag(corr), 1.0) and abs(corr[0, 1]) < 1
    assert f"{corr[0, 1]:+.3f}" in text
    assert est["main_bearing.viscous_friction"] == pytest.approx(1.3 * NOMINAL_FRICTION, rel=0.01)
    written = out.read_text()
    assert written.startswith(f"# Calibrated by `mbsd-twin twin calibrate` from {path} at ")
    assert "viscous_friction = " + repr(est["main_bearing.viscous_friction"]) in written
    assert "# N m s/rad" in written  # the user's comment on that line is kept
    params = model_parameters(load_mechanism(out))
    assert params["piston.mass"][0].value == est["piston.mass"]
    assert params["main_bearing.viscous_friction"][0].value == est["main_bearing.viscous_friction"]


def test_cli_bad_parameter_name_lists_valid_ones(mass_recording: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["twin", "calibrate", mass_recording, "--param", "piston.mas"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "'piston.mas' is not a fixed model parameter" in err
    assert "piston.mass" in err and "main_bearing.viscous_friction" in err


def test_bad_channel_and_noise_names(mass_recording: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["twin", "calibrate", mass_recording, "--param", "piston.mass", "--noise", "theta"]) == 2
    assert "--noise expects NAME=VALUE with a number, got 'theta'" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"channel 'tehta' is not compared.*theta, omega, f_x, f_y"):
        calibrate_recording(mass_recording, ["piston.mass"], channels=["tehta"])
    with pytest.raises(ValueError, match="--noise for 'f_x', which is not fitted"):
        calibrate_recording(mass_recording, ["piston.mass"], channels=["theta"], noise={"f_x": 0.5})


def test_unreadable_recording_names_file_and_line(mass_recording: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    lines = Path(mass_recording).read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines[:3]) + lines[3][:40] + "\n" + "".join(lines[4:10]) + lines[10][:-30])
    rec = read_recording(str(bad))  # torn lines (a failed write, a crash) are skipped and located
    assert rec.torn == (f"{bad}: line 4", f"{bad}: line 11") and rec.batches == 8 and len(rec.times) == 160
    msg = json.loads(lines[5])
    msg["p"] = msg["p"].replace('"n":20', '"n":19')
    bad.write_text("".join(lines[:5]) + json.dumps(msg) + "\n")
    with pytest.raises(ValueError, match=rf"{bad}: line 6: unreadable sensor message \(length"):
        read_recording(str(bad))
    bad.write_text("".join(lines[1:5]))
    with pytest.raises(ValueError, match=rf"{bad}: line 1: the recording does not start with a header"):
        read_recording(str(bad))
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl"):
        read_recording(str(tmp_path / "nowhere.jsonl"))


def test_torn_recording_still_calibrates(mass_recording: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A recording torn by write failures — every 10th batch line cut mid-way, and a gap record
    where the twin's recording was suspended — still recovers the hidden mass (the missing batches
    are gaps, where the shooting segments split), and the CLI says which lines it skipped."""
    lines = Path(mass_recording).read_text().splitlines(keepends=True)
    torn = tmp_path / "torn.jsonl"
    body = [ln[: len(ln) // 2] + "\n" if k % 10 == 5 else ln for k, ln in enumerate(lines[1:251], start=1)]
    torn.write_text(lines[0] + "".join(body[:100]) + '{"k":"gap","lost":3,"error":"No space left"}\n'
                    + "".join(body[103:]))
    assert main(["twin", "calibrate", str(torn), "--param", "piston.mass", "--channels", "theta,omega"]) == 0
    out = capsys.readouterr().out
    assert f"25 unreadable lines skipped (first: {torn}: line 6), 1 recording gaps" in out
    rec = read_recording(str(torn))
    assert len(rec.torn) == 25 and rec.gaps == 1 and rec.batches == 250 - 3 - 25
    cal, _ = calibrate_recording(str(torn), ["piston.mass"], channels=["theta", "omega"])
    check_recovered(cal.values[0], cal.stderr[0], 1.2 * NOMINAL_MASS)


def test_recording_duplicates_are_dropped(mass_recording: str, tmp_path: Path) -> None:
    lines = Path(mass_recording).read_text().splitlines(keepends=True)
    dup = tmp_path / "dup.jsonl"
    dup.write_text("".join([*lines[:4], lines[2], *lines[4:8]]))  # batch 1 again, after batch 2
    rec = read_recording(str(dup))
    assert rec.duplicates == 1 and rec.batches == 7 and len(rec.times) == 140
    assert np.allclose(np.diff(rec.times), 1e-3)
    # a new rig session may reuse seq numbers: its batches are kept, after the first session's
    dup.write_text("".join([*lines[:4], '{"k":"restart"}\n', *lines[1:3]]))
    rec = read_recording(str(dup))
    assert rec.duplicates == 0 and rec.batches == 5
    assert np.allclose(np.diff(rec.times)[:59], 1e-3) and rec.times[60] == 0.0


def test_recording_written_by_the_twin_core(tmp_path: Path) -> None:
    """A recording as the service writes it (TwinCore with a rotating Recorder: header, ``in``,
    ``out`` and ``cmd`` records over several segments) gives back exactly the streamed samples, and
    its first 1.5 s calibrate the hidden mass."""
    mech = load_mechanism(MECH)
    cfg = CoreConfig()
    path = str(tmp_path / "twin.jsonl")
    rec = Recorder(path, max_bytes=200_000)
    rec({"k": "header", "format": FORMAT, "core": cfg.to_dict(), "mechanism": MECH,
         "mechanism_toml": Path(MECH).read_text()})
    core = TwinCore(cfg, mech, rec)
    src = MessageSource(Trajectory(mech, RigConfig(mismatch={"piston.mass": 1.8}, noise=NOISE)), 1000.0)
    msgs = [src.message(i) for i in range(75)]
    for i, m in enumerate(msgs):
        if i == 30:
            core.command("reset", {})
        batch = parse_sensor(encode(m).encode(), cfg.asset, 1 << 20)
        assert isinstance(batch, SensorBatch)
        core.step(batch)
    rec.close()
    assert len(segments(path)) > 1
    data = read_recording(path)
    assert data.t_origin == 1000.0 and data.batches == 75
    for ch in ("tau_m", "theta", "omega", "f_x", "f_y"):
        assert np.array_equal(data.channels[ch], np.concatenate([m["ch"][ch] for m in msgs]))
    cal, _ = calibrate_recording(path, ["piston.mass"], channels=["theta", "omega"], t_end=1.5)
    assert cal.segments == 3
    check_recovered(cal.values[0], cal.stderr[0], 1.8)


# ---------------------------------------------------------------- pieces
def test_segments_split_at_gaps_and_merge_short_remainders() -> None:
    t = np.concatenate([np.arange(0, 1.23, 0.01), 2.0 + np.arange(0, 0.6, 0.01)])
    segs = shooting_segments(t, 0.5)
    assert segs == [(0, 50), (50, 123), (123, 183)]  # 123 + 60 samples; remainders of 23 and 10 merged
    with pytest.raises(ValueError, match="segment length"):
        shooting_segments(t, 0.0)


def test_noise_estimate_of_white_noise_on_a_smooth_signal() -> None:
    t = np.arange(0, 10, 1e-3)
    y = np.sin(10 * t) + np.random.default_rng(1).normal(0, 0.01, len(t))
    assert noise_estimate(y) == pytest.approx(0.01, rel=0.03)


def test_engine_errors_name_ports_and_parameters() -> None:
    mech = load_mechanism(MECH)
    t = np.arange(5) * 1e-3
    with pytest.raises(PortError, match="unknown input port 'torque'.*motor_torque"):
        calibrate(mech, ["piston.mass"], t, {"torque": t}, {"crank.theta": t})
    with pytest.raises(PortError, match="unknown output 'crank.angle'"):
        calibrate(mech, ["piston.mass"], t, {"motor_torque": t}, {"crank.angle": t})
    with pytest.raises(PortError, match="'solver.rtol' is not a fixed model parameter"):
        calibrate(mech, ["solver.rtol"], t, {"motor_torque": t}, {"crank.theta": t})
    with pytest.raises(ValueError, match="needs a measured angle output"):
        calibrate(mech, ["piston.mass"], t, {"motor_torque": t}, {"crank.omega": t})
    with pytest.raises(ValueError, match="unknown input hold 'linear'; holds: foh, zoh"):
        calibrate(mech, ["piston.mass"], t, {"motor_torque": t}, {"crank.theta": t}, hold="linear")
    stiff = SolverOptions(rtol=1e-12, atol=1e-14, max_steps=2, max_step=1e-5, initial_velocity="project")
    with pytest.raises(ValueError, match="cannot be run from the start values: integration failed at t="):
        calibrate(mech, ["piston.mass"], t, {"motor_torque": t}, {"crank.theta": 10 * t}, options=stiff, stride=1)


TRUTH = {"piston.mass": 1.7, "main_bearing.viscous_friction": 0.08}


def simulated_data(seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times, torque, [θ, ω] per sample) from the engine itself with the ``TRUTH`` parameters and
    a smooth torque driven through the same first-order hold as the fit, no noise."""
    sim = Simulator(apply_parameters(load_mechanism(MECH), TRUTH),
                    SolverOptions(rtol=1e-10, atol=1e-12, initial_velocity="project"))
    sim.set_configuration({"crank.theta": 0.3}, {"crank.omega": 8.0}, time=0.0)
    t = np.arange(round(seconds * 1000) + 1) * 1e-3
    tau = 0.6 + 0.3 * np.sin(4 * t)
    rows = [[sim.get_output("crank.theta"), sim.get_output("crank.omega")]]
    for k in range(len(t) - 1):
        for t_end, u in interval_steps(t[k], t[k + 1], {"motor_torque": tau[k]}, {"motor_torque": tau[k + 1]}):
            sim.set_input("motor_torque", u["motor_torque"])
            sim.advance_to(t_end)
        rows.append([sim.get_output("crank.theta"), sim.get_output("crank.omega")])
    return t, tau, np.array(rows)


def test_noise_free_simulated_data_give_the_hidden_values_to_solver_accuracy() -> None:
    t, tau, y = simulated_data(1.0)
    cal = calibrate(load_mechanism(MECH), list(TRUTH), t, {"motor_torque": tau},
                    {"crank.theta": y[:, 0], "crank.omega": y[:, 1]}, segment=0.5)
    assert cal.success and cal.segments == 2
    for name, v in cal.as_dict().items():
        assert v == pytest.approx(TRUTH[name], rel=1e-6)


def test_standard_errors_match_the_scatter_over_noise_realisations() -> None:
    """Monte Carlo: 12 fits of the same motion under independent noise (σ known). The spread of
    the estimates is what the reported standard errors (with the initial states marginalised)
    predict, and so is their correlation."""
    t, tau, y = simulated_data(1.0)
    sd = np.array([2e-3, 0.02])
    rng = np.random.default_rng(7)
    est, se, corr = [], [], []
    for _ in range(12):
        yn = y + rng.normal(0.0, sd, y.shape)
        cal = calibrate(load_mechanism(MECH), list(TRUTH), t, {"motor_torque": tau},
                        {"crank.theta": yn[:, 0], "crank.omega": yn[:, 1]},
                        noise={"crank.theta": sd[0], "crank.omega": sd[1]}, segment=0.5)
        est.append(cal.values)
        se.append(cal.stderr)
        corr.append(cal.correlation[0, 1])
    spread, predicted = np.std(est, axis=0, ddof=1), np.mean(se, axis=0)
    # 11 degrees of freedom: the sample σ lies within ±50 % of the true one with probability > 99 %
    assert np.all(np.abs(spread / predicted - 1) < 0.5), (spread, predicted)
    assert np.all(np.abs(np.mean(est, axis=0) - list(TRUTH.values())) < 3 * predicted / np.sqrt(12))
    assert np.corrcoef(np.array(est).T)[0, 1] == pytest.approx(np.mean(corr), abs=0.45)


def test_mechanism_writer_edits_the_exact_key_and_inserts_absent_ones(tmp_path: Path) -> None:
    text = Path(MECH).read_text()
    mech = load_mechanism(MECH)
    values = {"piston.mass": 1.8123, "crank.cg_y": 0.001, "crank_pin.viscous_friction": 0.01, "guide.p2_x": 0.002}
    new = set_parameters(text, mech, values)
    changed = [(a, b) for a, b in zip(text.splitlines(), new.splitlines(), strict=False) if a != b]
    assert ("mass = 1.5", "mass = 1.8123") in changed
    assert ("cg = [0.05, 0.0]                  # m, centre of mass in the body frame",
            "cg = [0.05, 0.001]                # m, centre of mass in the body frame") in changed
    assert len(new.splitlines()) == len(text.splitlines()) + 1  # crank_pin had no viscous_friction key
    assert 'points = [[0.1, 0.0], [0.0, 0.0]]\nviscous_friction = 0.01\n' in new
    params = model_parameters(loads_mechanism(new))
    assert all(params[n][0].value == v for n, v in values.items())
    assert params["rod.mass"][0].value == 2.0 and params["crank.mass"][0].value == 1.0
    out = tmp_path / "m.toml"
    write_mechanism(str(out), text, mech, {"piston.mass": 1.75}, header="line one\nline two")
    assert out.read_text().startswith("# line one\n# line two\n# Free slider crank")
    assert [p.name for p in tmp_path.iterdir()] == ["m.toml"]  # no temporary file left
    with pytest.raises(ValueError, match=r"(?s)\(parameters piston.mass\).*mass must be a finite number > 0"):
        set_parameters(text, mech, {"piston.mass": math.inf})
    with pytest.raises(ValueError, match="non-finite"):
        toml_value((0.0, math.nan))
    multi = text.replace("points = [[0.0, 0.0], [0.0, 0.0]]\naxis", "points = [\n[0.0, 0.0], [0.0, 0.0]]\naxis")
    with pytest.raises(ValueError, match=r"line \d+: cannot edit 'points'"):
        set_parameters(multi, mech, {"guide.p1_x": 0.1})
