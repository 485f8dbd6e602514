"""Result files (simulate's CSV, campaign summaries, history exports, calibrated mechanism files) are
written atomically and get the permissions the umask gives, as a plain ``open(path, "w")`` does:
0o666 less the umask (0644 under the usual 022), not ``tempfile.mkstemp``'s 0600 (mbsd_twin.atomic)."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from mbsd_twin.atomic import atomic_path, write_atomic

ROOT = Path(__file__).resolve().parents[1]
MECH = ROOT / "examples" / "mechanisms" / "slider_crank.toml"

# Runs in a process of its own under the umask given as argv[1] (a process-wide setting: never
# changed in the test process, where other threads create files); prints each file's mode.
WRITERS = """
import json, os, sys
from pathlib import Path
import numpy as np
os.umask(int(sys.argv[1], 8))
out, mech_path = Path(sys.argv[2]), sys.argv[3]
from mbsd_twin import load_mechanism
from mbsd_twin.cli import main
from mbsd_twin.campaign.report import write_summary
from mbsd_twin.estimation.mechfile import write_mechanism
from mbsd_twin.storage.history.export import export
(out / "sim.csv").write_text("an older result")  # replaced, and its mode with it
assert main(["simulate", mech_path, "--t-end", "0.01", "--output-interval", "0.005", "-o", str(out / "sim.csv")]) == 0
write_summary({"campaign": "c", "backend": "pool", "wall": 0.0, "ok": True, "jobs": []}, out / "campaign")
export([("theta", np.array([0.0, 0.001]), np.array([0.1, 0.2]), np.array([np.nan, 0.01]))], "sc-01", "csv",
       str(out / "history.csv"))
write_mechanism(str(out / "calibrated.toml"), Path(mech_path).read_text(), load_mechanism(mech_path),
                {"piston.mass": 1.8})
files = ["sim.csv", "campaign/summary.json", "campaign/summary.md", "history.csv", "calibrated.toml"]
print(json.dumps({f: os.stat(out / f).st_mode & 0o777 for f in files}))
"""


@pytest.mark.parametrize("umask", [0o022, 0o007])
def test_result_files_get_the_umask_permissions(tmp_path: Path, umask: int) -> None:
    proc = subprocess.run([sys.executable, "-c", WRITERS, oct(umask), str(tmp_path), str(MECH)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    modes = json.loads(proc.stdout.strip().splitlines()[-1])
    want = 0o666 & ~umask  # 0o644 and 0o660: neither is mkstemp's 0o600
    assert modes == dict.fromkeys(modes, want), {k: oct(v) for k, v in modes.items()}
    assert len(modes) == 5
    assert (tmp_path / "sim.csv").read_text().startswith("time,")  # the older file was replaced
    assert "piston" in (tmp_path / "calibrated.toml").read_text()
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]  # no temporary file left


def test_write_atomic_replaces_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "r.csv"
    write_atomic(target, "a,b\n1,2\n")  # creates the folder
    assert target.read_text() == "a,b\n1,2\n"
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "a,b\n3,\ud800\n")  # fails while writing: the old file stays
    assert target.read_text() == "a,b\n1,2\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["r.csv"]


def test_atomic_path_renames_on_success_and_cleans_up_on_error(tmp_path: Path) -> None:
    target = tmp_path / "export.parquet"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["export.parquet"]
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.exists() and stat.S_ISREG(tmp.stat().st_mode)
        tmp.write_text("new")
        assert target.read_text() == "old"  # not visible before the block ends
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["export.parquet"]
