"""One output file per FMI version: ``mbsd-twin fmu build -o FOLDER`` writes ``<Model>.fmu`` for FMI
2.0 and ``<Model>-fmi3.fmu`` for FMI 3.0, so both versions built into one folder are two FMUs; a
rebuild of one version replaces its own file only; a ``.fmu`` path is written as named (fmu/README.md,
"Build")."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

pytest.importorskip("pythonfmu3")

from mbsd_twin.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _identity(fmu: Path) -> tuple[str, str]:
    """(fmiVersion, guid or instantiationToken) from the FMU's modelDescription.xml."""
    import xml.etree.ElementTree as ET

    with zipfile.ZipFile(fmu) as zf:
        md = ET.fromstring(zf.read("modelDescription.xml"))
    return md.get("fmiVersion", ""), md.get("guid") or md.get("instantiationToken", "")


def _build(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["fmu", "build", *args]) == 0
    return capsys.readouterr().out


def test_fmi2_and_fmi3_builds_into_one_folder_are_two_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out2 = _build(capsys, "-o", str(tmp_path))
    out3 = _build(capsys, "-o", str(tmp_path), "--fmi-version", "3")
    fmi2, fmi3 = tmp_path / "SliderCrank.fmu", tmp_path / "SliderCrank-fmi3.fmu"
    assert f"FMU written: {fmi2}" in out2 and f"FMU written: {fmi3}" in out3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SliderCrank-fmi3.fmu", "SliderCrank.fmu"]
    (v2, guid2), (v3, token3) = _identity(fmi2), _identity(fmi3)
    assert (v2, v3) == ("2.0", "3.0")

    _build(capsys, "-o", str(tmp_path))  # FMI 2.0 again: its own file is replaced, the FMI 3.0 one kept
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SliderCrank-fmi3.fmu", "SliderCrank.fmu"]
    v2_again, guid2_again = _identity(fmi2)
    assert v2_again == "2.0" and guid2_again != guid2  # a new build (each build has its own guid)
    assert _identity(fmi3) == ("3.0", token3)


def test_a_named_file_is_written_as_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mech = ROOT / "examples" / "mechanisms" / "four_bar.toml"
    dest = tmp_path / "plant" / "FourBar3.fmu"
    out = _build(capsys, str(mech), "-o", str(dest), "--fmi-version", "3")
    assert f"FMU written: {dest}" in out and _identity(dest)[0] == "3.0"
    assert [p.name for p in dest.parent.iterdir()] == ["FourBar3.fmu"]
