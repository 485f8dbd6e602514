"""Configuration errors of the twin, rig and fleet files as good as the mechanism file's (issue 32,
item 4): every problem at once, each naming its key and value, the closest valid name ("did you
mean") and the valid names; a missing mechanism file named by key and resolved path; exit 2 from
the command line, before any connection is tried (the broker address is a closed port)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mbsd_twin import load_mechanism
from mbsd_twin.fleet.config import FleetError, load_fleet
from mbsd_twin.rig.file import RigFileError, load_rig_file
from mbsd_twin.twin.config.file import load_config
from mbsd_twin.twin.config.sections import ConfigError
from mbsd_twin.twin.core import TwinCore

ROOT = Path(__file__).resolve().parents[1]
MECH = str(ROOT / "examples" / "mechanisms" / "slider_crank.toml")
CLI = [sys.executable, "-c", "import sys; from mbsd_twin.cli import main; sys.exit(main())"]


def _serve(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "twin", "serve", "--config", str(config)], capture_output=True, text=True,
                          timeout=300, cwd=config.parent)


def test_twin_names_checked_against_the_mechanism_all_at_once(tmp_path: Path) -> None:
    cfg = tmp_path / "twin.toml"
    cfg.write_text(f'[broker]\nurl = "mqtt://127.0.0.1:1"\nprotocl = 5\n[service]\nmechanism = "{MECH}"\n'
                   '[core]\nstate_extra = ["pistn.x"]\n[core.compare]\ntheta = "crank.thetta"\nomega = "crank.omega"\n'
                   '[core.inputs]\ntau_m = "motor_torqe"\n[[core.augment]]\nname = "piston.mas"\nsigma = 0.1\n')
    proc = _serve(cfg)
    assert proc.returncode == 2, proc.stderr
    # the file's own problems first (unknown key), then, once they are mended, the names
    assert "[broker] unknown key 'protocl'; did you mean 'protocol'?" in proc.stderr
    cfg.write_text(cfg.read_text().replace("protocl = 5\n", ""))
    proc = _serve(cfg)
    err = proc.stderr
    assert proc.returncode == 2 and "4 configuration problem(s)" in err, err
    assert ("[core.compare] theta: 'crank.thetta' is not an output of the mechanism; did you mean 'crank.theta'?; "
            "outputs: crank.x, crank.y, crank.theta,") in err
    assert ("[core.inputs] tau_m: 'motor_torqe' is not an input port of the mechanism; did you mean "
            "'motor_torque'?; input ports: motor_torque, piston_force") in err
    assert "[core] state_extra: 'pistn.x' is not an output of the mechanism; did you mean 'piston.x'?" in err
    assert ("[[core.augment]] #1 name: 'piston.mas' is not a parameter or input bias of the mechanism; did you "
            "mean 'piston.mass'?") in err and "motor_torque.bias" in err
    assert "Traceback" not in err and "connect" not in err.lower()


def test_the_core_refuses_the_same_names_in_process() -> None:
    """Every face that builds a TwinCore (serve, replay, calibrate, the fleet) gets the check."""
    cfg = load_config(None, env={}, overrides={"core": {"compare": {"theta": "crank.thetta", "omega": "crank.omega"}}})
    with pytest.raises(ConfigError) as ei:
        TwinCore(cfg.core, load_mechanism(MECH))
    assert len(ei.value.problems) == 1 and "did you mean 'crank.theta'?" in ei.value.problems[0]


def test_a_missing_mechanism_names_the_key_and_the_resolved_path(tmp_path: Path) -> None:
    cfg = tmp_path / "twin.toml"
    cfg.write_text('[broker]\nurl = "mqtt://127.0.0.1:1"\n[service]\nmechanism = "mechs/crank.toml"\n')
    proc = _serve(cfg)
    assert proc.returncode == 2
    # a relative path of the file is relative to its folder (docs/service-config.md, "Relative paths")
    assert f"[service] mechanism = '{tmp_path / 'mechs' / 'crank.toml'}': no such file" in proc.stderr, proc.stderr
    assert "Errno" not in proc.stderr


def test_rig_file_problems_all_at_once_with_suggestions(tmp_path: Path) -> None:
    rig = tmp_path / "rig.toml"
    rig.write_text('duraton = 5\nrate = "fast"\nfaults = "none"\n')
    with pytest.raises(RigFileError) as ei:
        load_rig_file(rig)
    text = str(ei.value)
    assert str(rig) in text
    assert "unknown key 'duraton'; did you mean 'duration'?" in text
    assert "rate: expected float, got 'fast'" in text and "faults: expected a list of fault specs" in text
    proc = subprocess.run([*CLI, "rig", "--rig", str(rig), "--broker", "mqtt://127.0.0.1:1"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2 and "did you mean 'duration'?" in proc.stderr, proc.stderr


def test_fleet_file_unknown_keys_suggest_the_right_one(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[fleet]\nbrokr = "mqtt://127.0.0.1:1"\n[[asset]]\nid = "a1"\nmechansim = "x.toml"\n')
    with pytest.raises(FleetError) as ei:
        load_fleet(str(fleet))
    text = str(ei.value)
    assert "[fleet] unknown key 'brokr'; did you mean 'broker'?" in text
    assert "[[asset]] #1: unknown key(s) 'mechansim'; did you mean 'mechanism'?; known: id, mechanism, config, " \
        "overrides" in text
