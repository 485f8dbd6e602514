"""One rule for relative paths (issue 32, item 4; docs/service-config.md, "Relative paths"): a
relative path in a twin, rig, fleet or campaign file is relative to that file's folder, whatever
the working directory; one from the command line or the environment to the working directory.
Twin files resolved theirs against the working directory before: an input found only under the
old rule is an error naming the key and both paths, an output whose old place exists is written
beside the file with one warning. The shipped configurations load from any folder."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mbsd_twin.campaign import load_campaign
from mbsd_twin.fleet.config import FleetError, load_fleet
from mbsd_twin.rig.file import load_rig_file
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import ConfigError

ROOT = Path(__file__).resolve().parents[1]
MECH = ROOT / "examples" / "mechanisms" / "slider_crank.toml"
CLI = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())"]


@pytest.fixture
def layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``conf/`` with a mechanism in ``conf/mechs/`` and a twin file in ``conf/twins/``; the working
    directory is ``elsewhere/``, a sibling, which holds nothing."""
    conf = tmp_path / "conf"
    (conf / "mechs").mkdir(parents=True)
    (conf / "twins").mkdir()
    shutil.copy(MECH, conf / "mechs" / "crank.toml")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return conf


def test_twin_rig_fleet_and_campaign_files_resolve_against_their_own_folder(layout: Path) -> None:
    mech = str(layout / "mechs" / "crank.toml")
    twin = layout / "twin.toml"
    twin.write_text('[service]\nmechanism = "mechs/crank.toml"\n[record]\npath = "rec/twin.jsonl"\n'
                    '[history]\npath = "hist.sqlite"\nspool_dir = "spool"\n')
    cfg = load_config(str(twin), env={})
    assert cfg.service.mechanism == mech
    assert (cfg.record.path, cfg.history.path, cfg.history.spool_dir) == (
        str(layout / "rec" / "twin.jsonl"), str(layout / "hist.sqlite"), str(layout / "spool"))

    rig = layout / "rig.toml"
    rig.write_text('mechanism = "mechs/crank.toml"\n')
    assert load_rig_file(rig).mechanism == mech

    # a twin file in another folder, named by the fleet: its paths relative to its own folder
    (layout / "twins" / "twin.toml").write_text('[service]\nmechanism = "../mechs/crank.toml"\n')
    fleet = layout / "fleet.toml"
    fleet.write_text('[fleet]\nconfig = "twins/twin.toml"\nstore = "state/cp.sqlite"\n'
                     '[[asset]]\nid = "a1"\n'
                     '[[asset]]\nid = "a2"\nmechanism = "mechs/crank.toml"\n'
                     '[asset.overrides.record]\npath = "a2.jsonl"\n')
    f = load_fleet(str(fleet))
    assert f.settings.config == str(layout / "twins" / "twin.toml")
    assert f.settings.store == str(layout / "state" / "cp.sqlite")
    a1, a2 = (a.twin_config(f.settings) for a in f.assets)
    assert a1.service.mechanism == a2.service.mechanism == mech
    assert a2.record.path == str(layout / "a2.jsonl")  # the fleet file's overrides: relative to it

    camp = layout / "campaign.toml"
    camp.write_text('[[jobs]]\nkind = "fmu_vs_native"\nmechanism = "mechs/crank.toml"\n')
    assert str(load_campaign(camp).jobs[0].mechanism) == mech  # type: ignore[union-attr]


def test_command_line_and_environment_paths_stay_relative_to_the_working_directory(layout: Path) -> None:
    twin = layout / "twin.toml"
    twin.write_text('[service]\nmechanism = "mechs/crank.toml"\n[record]\npath = "rec.jsonl"\n')
    cfg = load_config(str(twin), env={"MBSD_TWIN_RECORD": "from-env.jsonl"},
                      overrides={"service": {"mechanism": "flag.toml"}})
    assert (cfg.service.mechanism, cfg.record.path) == ("flag.toml", "from-env.jsonl")


def test_an_input_found_only_under_the_old_rule_names_the_key_and_both_paths(layout: Path) -> None:
    cwd = Path.cwd()
    (cwd / "mechs").mkdir()
    shutil.copy(MECH, cwd / "mechs" / "old.toml")
    (cwd / "ca.pem").write_text("not read\n")
    twin = layout / "twin.toml"
    twin.write_text('[broker]\ntls_ca = "ca.pem"\n[service]\nmechanism = "mechs/old.toml"\n')
    with pytest.raises(ConfigError) as ei:
        load_config(str(twin), env={})
    problems = ei.value.problems
    mech = next(p for p in problems if p.startswith("[service] mechanism = 'mechs/old.toml'"))
    assert str(layout / "mechs" / "old.toml") in mech and str(cwd / "mechs" / "old.toml") in mech
    assert "the rule changed" in mech and "relative to the file's folder" in mech
    ca = next(p for p in problems if p.startswith("[broker] tls_ca = 'ca.pem'"))
    assert str(layout / "ca.pem") in ca and str(cwd / "ca.pem") in ca
    assert str(twin) in str(ei.value)  # the file is named

    # the same in a fleet file's overrides (relative to the working directory before too)
    fleet = layout / "fleet.toml"
    fleet.write_text('[[asset]]\nid = "a1"\n[asset.overrides.service]\nmechanism = "mechs/old.toml"\n')
    with pytest.raises(FleetError) as fe:
        load_fleet(str(fleet))
    text = str(fe.value)
    assert "[[asset]] 'a1' overrides service.mechanism = 'mechs/old.toml'" in text
    assert str(layout / "mechs" / "old.toml") in text and str(cwd / "mechs" / "old.toml") in text

    # from the command line: exit 2 before anything starts, the same message
    proc = subprocess.run([*CLI, "twin", "serve", "--config", str(twin)], capture_output=True, text=True,
                          timeout=300, cwd=cwd)
    assert proc.returncode == 2, proc.stderr
    assert "[service] mechanism = 'mechs/old.toml': the rule changed" in proc.stderr
    assert str(cwd / "mechs" / "old.toml") in proc.stderr and "Traceback" not in proc.stderr


def test_an_output_goes_beside_the_file_with_one_warning_if_the_old_place_exists(
        layout: Path, caplog: pytest.LogCaptureFixture) -> None:
    (Path.cwd() / "twin.jsonl").write_text("")  # written under the old rule
    twin = layout / "twin.toml"
    twin.write_text('[record]\npath = "twin.jsonl"\n[history]\npath = "fresh.sqlite"\n')
    with caplog.at_level(logging.WARNING, logger="mbsd_twin.config"):
        for _ in range(2):
            cfg = load_config(str(twin), env={})
            assert cfg.record.path == str(layout / "twin.jsonl")
            assert cfg.history.path == str(layout / "fresh.sqlite")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # once, and none for the history (no file at its old place)
    assert "[record] path = 'twin.jsonl'" in warnings[0] and str(layout / "twin.jsonl") in warnings[0]
    assert str(Path.cwd() / "twin.jsonl") in warnings[0]


def test_where_both_rules_agree_nothing_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    """Run from the file's own folder (how the shipped examples were run): no error, no warning."""
    shutil.copy(MECH, tmp_path / "crank.toml")
    (tmp_path / "twin.jsonl").write_text("")
    (tmp_path / "twin.toml").write_text('[service]\nmechanism = "crank.toml"\n[record]\npath = "twin.jsonl"\n')
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="mbsd_twin.config"):
        cfg = load_config("twin.toml", env={})
    assert cfg.service.mechanism == str(tmp_path / "crank.toml") and not caplog.records


SHIPPED_TWIN = ["services/twin.toml", "examples/twin/quick_return.toml", "examples/rigs/pendulum_twin.toml"]


@pytest.mark.parametrize("name", SHIPPED_TWIN)
def test_shipped_twin_configurations_load_from_any_folder(name: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(str(ROOT / name), env={})
    assert not cfg.service.mechanism or os.path.isfile(cfg.service.mechanism), cfg.service.mechanism


def test_every_shipped_configuration_file_is_covered() -> None:
    """Each TOML under examples/ and services/ that is a twin, rig, fleet or campaign file is among
    those checked here (a new one with a relative path must be added)."""
    found = sorted(str(p.relative_to(ROOT)) for d in ("examples", "services") for p in (ROOT / d).rglob("*.toml")
                   if "mechanisms" not in p.parts)
    assert found == sorted([*SHIPPED_TWIN, "examples/rigs/pendulum_rig.toml", "examples/fleet/fleet.toml",
                            "examples/campaigns/oscillator_study.toml"])


def test_shipped_rig_fleet_and_campaign_files_load_from_any_folder(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert os.path.isfile(load_rig_file(ROOT / "examples/rigs/pendulum_rig.toml").mechanism)
    fleet = load_fleet(str(ROOT / "examples/fleet/fleet.toml"))  # checks every asset's mechanism
    assert fleet.settings.store == str(ROOT / "examples/fleet/fleet-checkpoints.sqlite")
    camp = load_campaign(ROOT / "examples/campaigns/oscillator_study.toml")
    assert all(os.path.isfile(getattr(j, "mechanism", MECH)) for j in camp.jobs)
