"""Second importer (OSP libcosim via libcosimpy) against fmpy, and the ``mbsd-twin fmu`` commands.
Importers run in subprocesses (``python -m mbsd_twin.fmi.importers``)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pythonfmu")
pytest.importorskip("fmpy")

from fmu_harness import shared_fmu  # noqa: E402

from mbsd_twin.errors import FmuWarning  # noqa: E402
from mbsd_twin.fmi.build import build_fmu  # noqa: E402

INPUTS = ["--input=motor_torque=pwc:2:0.3:-1:0.6:3", "--input=piston_force=step:0.5:0:-20"]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def fmu(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shared_fmu(tmp_path_factory, "pythonfmu2", tmp_path_factory.mktemp("fmu") / "SliderCrank.fmu")


def _start(kind: str, fmu: Path, out: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "mbsd_twin.fmi.importers", kind, str(fmu), "--stop", "1.0", "--step", "0.001",
           *INPUTS, "--out", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _load(proc: subprocess.Popen[str], out: Path) -> dict[str, np.ndarray]:
    log, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0 and out.exists(), log
    with np.load(out) as data:
        return {k: np.array(data[k]) for k in data.files}


def test_libcosim_agrees_with_fmpy(fmu: Path, tmp_path: Path) -> None:
    import libcosimpy  # noqa: F401  (test extra: a missing second importer is a failure, not a skip)

    procs = {k: (_start(k, fmu, tmp_path / f"{k}.npz"), tmp_path / f"{k}.npz") for k in ("libcosim", "fmpy")}
    cosim, fmpy_run = (_load(*procs[k]) for k in ("libcosim", "fmpy"))
    assert len(cosim["time"]) == 1000 and len(fmpy_run["time"]) == 1001  # libcosim has no t = 0 row
    ref = {k: v[1:] for k, v in fmpy_run.items()}
    np.testing.assert_allclose(cosim["time"], ref["time"], rtol=0, atol=1e-12)
    energy_scale = max(float(np.abs(v).max()) for k, v in ref.items() if k.startswith("energy."))
    for name, values in ref.items():
        if name == "time":
            continue
        scale = energy_scale if name.startswith("energy.") else float(np.abs(values).max())
        if name.startswith("constraints."):
            scale = 1e-3  # residual ≈ 0: compare against 1 mm
        err = float(np.abs(cosim[name] - values).max())
        assert err <= 1e-9 * scale, f"{name}: libcosim vs fmpy {err:.3g} (scale {scale:.3g})"
    assert np.abs(ref["crank.omega"]).max() > 1.0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mbsd_twin.cli", *args], capture_output=True, text=True,
                          timeout=600)


def test_cli_build_and_validate_pass(tmp_path: Path) -> None:
    built = _cli("fmu", "build", "-o", str(tmp_path / "SliderCrank.fmu"), "--check")
    assert built.returncode == 0, built.stdout + built.stderr
    assert "fmpy validate and fmutool -check passed" in built.stdout
    res = _cli("fmu", "validate", str(tmp_path / "SliderCrank.fmu"), "--stop-time", "0.2", "--step", "0.001",
               *INPUTS, "--csv", str(tmp_path / "csv"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PASS: 22/22 outputs in band" in res.stdout
    assert (tmp_path / "csv" / "errors.csv").exists() and (tmp_path / "csv" / "fmu.csv").exists()


def test_cli_validate_exits_nonzero_on_mismatch(fmu: Path, tmp_path: Path) -> None:
    other = tmp_path / "heavier.toml"
    text = (ROOT / "examples/mechanisms/slider_crank.toml").read_text()
    other.write_text(text.replace("mass = 1.0                        # kg", "mass = 1.1", 1))
    res = _cli("fmu", "validate", str(fmu), "--mechanism", str(other), "--stop-time", "0.1", "--no-checks",
               *INPUTS)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "FAIL" in res.stdout and " NO" in res.stdout


def test_cli_rejects_bad_profile(fmu: Path) -> None:
    res = _cli("fmu", "validate", str(fmu), "--input", "motor_torque=step:1", "--no-checks")
    assert res.returncode == 2 and "expected step:T:V0:V1" in res.stderr


def test_libcosim_refuses_an_fmi3_fmu_with_a_reason(tmp_path: Path) -> None:
    """libcosimpy 0.0.6 has no FMI 3.0 importer and crashes on such an FMU: the runner names the
    FMU's version and what to build instead, and runs nothing."""
    from mbsd_twin.fmi.fmi3 import build_fmu3
    from mbsd_twin.fmi.importers import run_libcosim

    fmu3 = build_fmu3(None, tmp_path / "SliderCrank3.fmu")
    with pytest.raises(ValueError, match=r"FMI 1\.0 and 2\.0 FMUs only, this one is FMI 3\.0.*--fmi-version 2"):
        run_libcosim(fmu3, 0.01, 0.001)


def test_an_fmu_without_inputs_builds_with_a_warning(tmp_path: Path) -> None:
    """A mechanism with no load input (the double pendulum) still builds, but the build says that
    a co-simulation cannot drive it; one with inputs (the slider crank) builds without a word."""
    built = _cli("fmu", "build", str(ROOT / "examples/mechanisms/double_pendulum.toml"), "-o", str(tmp_path))
    assert built.returncode == 0, built.stdout + built.stderr
    assert "warning:" in built.stdout and "has no input" in built.stdout and "input = " in built.stdout
    with pytest.warns(FmuWarning, match="double_pendulum.toml: .* has no input"):
        build_fmu(ROOT / "examples/mechanisms/double_pendulum.toml", tmp_path / "b.fmu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", FmuWarning)
        build_fmu(None, tmp_path / "SliderCrank.fmu")
