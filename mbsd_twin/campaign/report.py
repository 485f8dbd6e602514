"""The campaign's one summary: ``summary.json`` and ``summary.md`` (a table per job kind: pass/fail,
the task's grid point or recording, its figures, wall time), each written atomically."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..atomic import write_atomic
from .config import Campaign
from .tasks import Task

KIND_TITLES = {"sweep": "Parameter sweeps", "fmu_vs_native": "FMU vs native", "calibrate": "Calibrations"}


def summarise(campaign: Campaign, done: list[tuple[Task, dict[str, Any]]], backend: str,
              wall: float) -> dict[str, Any]:
    """The summary as plain data: per job its tasks (point, ok, figures, error, wall) in task order
    and verdict."""
    by_job: dict[int, list[tuple[Task, dict[str, Any]]]] = {}
    for t, res in done:
        by_job.setdefault(id(t.job), []).append((t, res))
    jobs = []
    for job in campaign.jobs:
        rows = [{"index": t.index, "point": t.point, **res}
                for t, res in sorted(by_job.get(id(job), []), key=lambda p: p[0].index)]
        jobs.append({"name": job.name, "kind": job.kind, "ok": all(r["ok"] for r in rows),
                     "passed": sum(r["ok"] for r in rows), "tasks": rows})
    return {"campaign": campaign.name, "source": str(campaign.source), "backend": backend, "wall": wall,
            "ok": all(j["ok"] for j in jobs), "jobs": jobs}


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.6g}"
    return str(v).replace("|", "\\|")


def _cell(key: str, value: Any) -> str:
    return _fmt(Path(value).name if key == "recording" else value)


def markdown(summary: dict[str, Any]) -> str:
    n_ok = sum(j["ok"] for j in summary["jobs"])
    lines = [f"# Campaign {summary['campaign']}", "",
             f"{'PASS' if summary['ok'] else 'FAIL'}: {n_ok}/{len(summary['jobs'])} jobs passed; "
             f"{summary['backend']}; wall time {summary['wall']:.1f} s", ""]
    for kind, title in KIND_TITLES.items():
        jobs = [j for j in summary["jobs"] if j["kind"] == kind]
        if not jobs:
            continue
        lines += [f"## {title}", ""]
        for j in jobs:
            point_keys = list(dict.fromkeys(k for r in j["tasks"] for k in r["point"]))
            fig_keys = list(dict.fromkeys(k for r in j["tasks"] for k in r["figures"]))
            head = ["task", "result", *point_keys, *fig_keys, "wall [s]", "error"]
            lines += [f"### {j['name']}: {'pass' if j['ok'] else 'FAIL'} ({j['passed']}/{len(j['tasks'])})", "",
                      "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
            for r in j["tasks"]:
                cells = [str(r["index"]), "pass" if r["ok"] else "FAIL",
                         *(_cell(k, r["point"].get(k, "")) for k in point_keys),
                         *(_fmt(r["figures"].get(k, "")) for k in fig_keys), _fmt(r["wall"]), _fmt(r["error"])]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


def _strict(value: Any) -> Any:
    """NaN and infinities as null (strict JSON), in nested lists and dicts."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    return value


def write_summary(summary: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "summary.json", out / "summary.md"
    write_atomic(js, json.dumps(_strict(summary), indent=2, default=str, allow_nan=False) + "\n")
    write_atomic(md, markdown(summary))
    return js, md
