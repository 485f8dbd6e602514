"""Campaigns (issue #19 item 3): a sweep checked against closed forms, an FMU-vs-native job, a
failing job reported without stopping the others, and the same campaign on the process pool and on
a real two-node Ray cluster started here, giving identical numbers."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mbsd_twin.campaign import PoolBackend, RayBackend, load_campaign, run_campaign
from mbsd_twin.campaign.local_cluster import LocalRayCluster, pids_holding
from mbsd_twin.errors import CampaignError

ROOT = Path(__file__).resolve().parents[1]
MSD = ROOT / "examples/mechanisms/mass_spring_damper.toml"
PENDULUM = ROOT / "examples/mechanisms/pendulum.toml"
STIFFNESS, MASS = (200.0, 800.0), (0.5, 2.0)

SWEEP = f"""
[[jobs]]
kind = "sweep"
name = "spring"
mechanism = "{MSD}"
duration = 1.5
outputs = ["block.x", "energy.total"]
statistics = ["min", "max", "period", "final"]
fixed = {{ "spring.damping" = 0.0 }}
[jobs.grid]
"spring.stiffness" = {list(STIFFNESS)}
"block.mass" = {list(MASS)}

[[jobs]]
kind = "sweep"
name = "broken"
mechanism = "{MSD}"
duration = 0.1
outputs = ["block.no_such_output"]
[jobs.grid]
"spring.stiffness" = [100.0]
"""
FMU = f"""
[[jobs]]
kind = "fmu_vs_native"
name = "pendulum-fmu"
mechanism = "{PENDULUM}"
stop_time = 0.3
step = 0.001
"""


def _write(folder: Path, text: str) -> Path:
    path = folder / "campaign.toml"
    path.write_text('name = "test"\n' + text)
    return path


def _figures(summary: dict[str, Any], job: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(r["point"], r["figures"]) for j in summary["jobs"] if j["name"] == job for r in j["tasks"]]


@pytest.fixture(scope="module")
def pool_summary(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("campaign")
    with open(folder / "progress.txt", "w") as stream:
        run_campaign(load_campaign(_write(folder, SWEEP + FMU)), PoolBackend(2), folder / "out", stream)
    summary = json.loads((folder / "out/summary.json").read_text())
    summary["progress"] = (folder / "progress.txt").read_text()
    summary["md"] = (folder / "out/summary.md").read_text()
    return summary


def test_sweep_matches_the_undamped_oscillator(pool_summary: dict[str, Any]) -> None:
    """x(t) = 0.5 + 0.1 cos(sqrt(k/m) t) without damping: period 2π sqrt(m/k), range 0.4..0.6 m,
    and the energy stays ½ k 0.1² (the block moves along x: no change of height)."""
    rows = _figures(pool_summary, "spring")
    assert len(rows) == 4
    assert {(p["spring.stiffness"], p["block.mass"]) for p, _ in rows} == {(k, m) for k in STIFFNESS for m in MASS}
    for p, f in rows:
        k, m = p["spring.stiffness"], p["block.mass"]
        assert f["block.x.period"] == pytest.approx(2 * math.pi * math.sqrt(m / k), rel=1e-5)
        assert f["block.x.min"] == pytest.approx(0.4, abs=1e-4)
        assert f["block.x.max"] == pytest.approx(0.6, abs=1e-9)
        assert f["energy.total.final"] - f["energy.total.min"] == pytest.approx(0.0, abs=1e-6 * k)
        assert f["energy.total.max"] - f["energy.total.min"] < 1e-6 * 0.5 * k * 0.01
    assert next(j for j in pool_summary["jobs"] if j["name"] == "spring")["ok"]


def test_a_failing_job_is_reported_and_the_others_finish(pool_summary: dict[str, Any]) -> None:
    jobs = {j["name"]: j for j in pool_summary["jobs"]}
    assert not pool_summary["ok"] and not jobs["broken"]["ok"] and jobs["spring"]["passed"] == 4
    err = jobs["broken"]["tasks"][0]["error"]
    assert "block.no_such_output" in err and err.startswith("PortError")
    assert "| 0 | FAIL | 100 |" in pool_summary["md"] and "### broken: FAIL (0/1)" in pool_summary["md"]
    assert pool_summary["progress"].count("\n") == 6 and "[6/6]" in pool_summary["progress"]


def test_fmu_vs_native_passes(pool_summary: dict[str, Any]) -> None:
    job = next(j for j in pool_summary["jobs"] if j["name"] == "pendulum-fmu")
    (task,) = job["tasks"]
    assert job["ok"], task
    f = task["figures"]
    assert f["outputs"] == f["in_band"] > 10 and f["worst_max_abs"] <= f["worst_band"]
    assert "## FMU vs native" in pool_summary["md"]


@pytest.mark.parametrize("text, key", [
    ('[[jobs]]\nkind = "sweeep"\n', "'kind'"),
    (f'[[jobs]]\nkind = "sweep"\nmechanism = "{MSD}"\nduration = 1\noutputs = ["block.x"]\n', "'grid'"),
    (f'[[jobs]]\nkind = "sweep"\nmechanism = "{MSD}"\nduration = -1\noutputs = ["block.x"]\n'
     '[jobs.grid]\n"spring.stiffness" = [1.0]\n', "'duration'"),
    (f'[[jobs]]\nkind = "fmu_vs_native"\nmechanism = "{MSD}"\nstep_size = 0.1\n', "'step_size'"),
    ('[[jobs]]\nkind = "fmu_vs_native"\nmechanism = "missing.toml"\n', "'mechanism'"),
    ('[[jobs]]\nkind = "calibrate"\nrecordings = ["none-*.jsonl"]\nparams = ["a.mass"]\n', "'recordings'"),
    ('jobs = 3\n', "'jobs'"),
])
def test_bad_campaign_files_name_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    assert str(path) in str(info.value) and key in str(info.value)


# ------------------------------------------------------------------ a real two-node Ray cluster
@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """A head and a second node, one CPU each, in their own temp dir and ports; every process of
    the cluster is killed at the end (never a bare ``ray stop``, which would end a colleague's)."""
    cluster = LocalRayCluster(nodes=2, cpus=1, prefix="h19b_",
                              env={"PYTHONPATH": str(ROOT), "NUMBA_NUM_THREADS": "1"})
    address = cluster.start()
    try:
        yield address
    finally:
        cluster.stop()
        assert pids_holding(cluster.temp) == []


def test_ray_cluster_gives_the_pool_numbers(ray_cluster: str, pool_summary: dict[str, Any], tmp_path: Path) -> None:
    backend = RayBackend(ray_cluster)
    try:
        assert "2 nodes, 2 CPUs" in backend.name
        with open(tmp_path / "progress.txt", "w") as stream:
            summary = run_campaign(load_campaign(_write(tmp_path, SWEEP)), backend, tmp_path / "out", stream)
    finally:
        backend.close()
    assert summary["backend"].startswith(f"Ray at {ray_cluster} (2 nodes")
    for job in ("spring", "broken"):
        ray_rows = sorted(_figures(summary, job), key=lambda r: sorted(r[0].items()))
        pool_rows = sorted(_figures(pool_summary, job), key=lambda r: sorted(r[0].items()))
        assert ray_rows == pool_rows
    broken = next(j for j in summary["jobs"] if j["name"] == "broken")
    assert not broken["ok"] and "block.no_such_output" in broken["tasks"][0]["error"]


def test_ray_submits_lazily_and_reports_an_overrun(ray_cluster: str, tmp_path: Path) -> None:
    backend = RayBackend(ray_cluster)
    try:
        outstanding = _lazy_run(backend, tmp_path, 2)
        assert max(outstanding) == 2 and outstanding[0] == 2
        path = _write(tmp_path, f"task_timeout = {BUDGET}\n" + SLOW + QUICK)
        _check_overrun(run_campaign(load_campaign(path), backend, tmp_path / "out", io.StringIO()))
    finally:
        backend.close()


def test_calibrate_over_recordings(tmp_path: Path) -> None:
    """Two recordings of the synthetic rig whose piston is 1.8 kg (the model says 1.5): each fit
    finds 1.8 within its standard error; ``expected`` decides pass or fail per recording."""
    from mbsd_twin.rig.recording import write_rig_recording
    from mbsd_twin.rig.synthetic import RigConfig

    for seed in (1, 2):
        write_rig_recording(str(tmp_path / f"rig-{seed}.jsonl"), str(ROOT / "examples/mechanisms/slider_crank.toml"),
                            RigConfig(mismatch={"piston.mass": 1.8}, seed=seed), 1.0)
    job = '[[jobs]]\nkind = "calibrate"\nname = "{}"\nrecordings = ["rig-*.jsonl"]\nparams = ["piston.mass"]\n' \
          'expected = {{ "piston.mass" = {} }}\nrtol = 0.01\n'
    path = _write(tmp_path, job.format("right", 1.8) + job.format("wrong", 1.5))
    summary = run_campaign(load_campaign(path), PoolBackend(2), tmp_path / "out", io.StringIO())
    jobs = {j["name"]: j for j in summary["jobs"]}
    assert jobs["right"]["ok"] and not jobs["wrong"]["ok"] and jobs["wrong"]["passed"] == 0
    for task in jobs["right"]["tasks"]:
        f = task["figures"]
        assert abs(f["piston.mass"] - 1.8) < 4 * f["piston.mass.stderr"] and f["piston.mass.stderr"] < 0.01
        assert 0.8 < f["reduced_chi2"] < 1.2 and Path(task["point"]["recording"]).name.startswith("rig-")
    assert [t["figures"] for t in jobs["right"]["tasks"]] == [t["figures"] for t in jobs["wrong"]["tasks"]]


# ------------------------------------------------------------------ limits (issue #30 item 7)
def _sweep_job(name: str, grid: dict[str, list[float]], duration: float = 0.05, interval: float = 0.001) -> str:
    rows = "\n".join(f'"{k}" = {v}' for k, v in grid.items())
    return (f'[[jobs]]\nkind = "sweep"\nname = "{name}"\nmechanism = "{MSD}"\nduration = {duration}\n'
            f'output_interval = {interval}\noutputs = ["block.x"]\nstatistics = ["final"]\n[jobs.grid]\n{rows}\n')


def test_a_campaign_is_counted_not_expanded_and_refused_above_max_tasks(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """2.2·10¹⁰ grid points (the product of five lists of 115, 116, 117, 118 and 119 values, plus one
    FMU task) are counted, never made, and refused naming the key and the count."""
    sizes = (115, 116, 117, 118, 119)
    grid = {f"p{k}": [float(x) for x in range(n)] for k, n in enumerate(sizes)}
    path = _write(tmp_path, _sweep_job("huge", grid) + FMU)
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    total = math.prod(sizes) + 1
    assert total == 21_916_472_761  # 115·116 = 13,340; ·117 = 1,560,780; ·118 = 184,172,040; ·119
    msg = str(info.value)
    assert "key 'max_tasks'" in msg and f"has {total} tasks" in msg and "max_tasks = 100000" in msg
    assert "job 'huge': 21916472760" in msg and str(path) in msg
    # the command line: exit status 2 and the message, no traceback, nothing written
    from mbsd_twin.cli import main

    assert main(["campaign", "run", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mbsd-twin campaign: error: ") and "max_tasks" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()
    # the limit is the file's own key: six tasks pass max_tasks = 6 and are refused at 5
    small = _sweep_job("six", {"spring.stiffness": [100.0, 200.0, 300.0], "block.mass": [1.0, 2.0]})
    path.write_text("max_tasks = 6\n" + small)
    assert load_campaign(path).limits.max_tasks == 6
    path.write_text("max_tasks = 5\n" + small)
    with pytest.raises(CampaignError, match=r"key 'max_tasks': the campaign has 6 tasks .* above max_tasks = 5"):
        load_campaign(path)


def _lazy_run(backend: PoolBackend | RayBackend, tmp_path: Path, in_flight: int) -> list[int]:
    """Run a 12-point sweep through ``backend`` with a counting iterator of its tasks; for each result,
    the tasks taken from the iterator and not yet returned when it came."""
    from mbsd_twin.campaign import expand, run_task

    campaign = load_campaign(_write(tmp_path, f"max_in_flight = {in_flight}\n" + _sweep_job(
        "lazy", {"spring.stiffness": [100.0 + k for k in range(12)]})))
    drawn = [0]

    def counting() -> Iterator[Any]:
        for task in expand(campaign):
            drawn[0] += 1
            yield task

    outstanding, returned = [], 0
    for _, _task, res in backend.run(run_task, counting(), campaign.limits.max_in_flight):
        outstanding.append(drawn[0] - returned)
        returned += 1
        assert res["ok"], res
    assert returned == 12 and drawn[0] == 12
    return outstanding


def test_the_pool_submits_lazily_with_bounded_tasks_in_flight(tmp_path: Path) -> None:
    outstanding = _lazy_run(PoolBackend(2), tmp_path, 3)
    assert max(outstanding) == 3 and outstanding[0] == 3


# a quick task's budget holds its worker's first Simulator (the kernels loaded from the cache:
# about 1 s on a quiet machine, several on a slow or loaded one, where 1.5 s timed quick tasks out)
BUDGET = 12.0
SLOW = _sweep_job("slow", {"spring.stiffness": [100.0]}, duration=2.0e6, interval=0.01)  # 20000 s took < 12 s here
QUICK = _sweep_job("quick", {"spring.stiffness": [100.0, 400.0]})


def _check_overrun(summary: dict[str, Any]) -> None:
    jobs = {j["name"]: j for j in summary["jobs"]}
    (slow,) = jobs["slow"]["tasks"]
    assert not slow["ok"] and slow["error"].startswith("TaskTimeout: ")
    assert f"task_timeout = {BUDGET:g} s" in slow["error"]
    assert jobs["quick"]["ok"] and jobs["quick"]["passed"] == 2 and not summary["ok"]


def test_a_task_past_its_wall_clock_budget_is_that_tasks_error(tmp_path: Path) -> None:
    path = _write(tmp_path, f"task_timeout = {BUDGET}\n" + SLOW + QUICK)
    summary = run_campaign(load_campaign(path), PoolBackend(2), tmp_path / "out", io.StringIO())
    _check_overrun(summary)
    assert "TaskTimeout" in (tmp_path / "out/summary.md").read_text()
