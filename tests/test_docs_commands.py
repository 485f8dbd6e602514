"""Every command of every fenced ``sh`` block of README.md and docs/*.md runs (docs/getting-started.md,
"How the commands in these pages are tested"): a block is one ``bash -e`` script from the root of a
checkout in a temporary folder (links to the repository's files; its own ``out``); a command
marked ``<!-- docs-test: COMMAND => SHORTENED -->`` runs in its shortened form."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mbsd_twin.demo.procs import free_port

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"^<!-- docs-test: (.+?) => (.+?) -->", re.M)


def _key(line: str) -> str:
    """The command of a line without its trailing ``# comment``."""
    return re.split(r"\s+#\s", line.strip(), maxsplit=1)[0].strip()


def blocks() -> list[tuple[str, int, list[str], dict[str, str]]]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        marks = {a.strip(): b.strip() for a, b in MARKER.findall(text)}
        for k, m in enumerate(FENCE.finditer(text)):
            lines = [ln for ln in m.group(1).splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
            out.append((page.name, k, lines, marks))
    return out


BLOCKS = blocks()


def test_markers_name_commands_in_blocks() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        commands = {_key(ln) for m in FENCE.finditer(text) for ln in m.group(1).splitlines()}
        for cmd, _ in MARKER.findall(text):
            assert cmd.strip() in commands, f"{page.name}: marker for a command not in any sh block: {cmd}"
    assert len(BLOCKS) >= 8 and any(p == "getting-started.md" for p, *_ in BLOCKS)


def test_readme_quick_start_has_exactly_two_commands() -> None:
    quick = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    fences = FENCE.findall(quick)
    assert len(fences) == 1 and [ln for ln in fences[0].splitlines() if ln.strip()] == ["make demo", "make test"]


def test_fmu_variable_table_is_generated() -> None:
    from mbsd_twin import Simulator, load_mechanism
    from mbsd_twin.fmi.build import bundled_slider_crank
    from mbsd_twin.fmi.variables import SLIDER_CRANK_OUTPUTS, fmu_variables, markdown_table

    table = markdown_table(fmu_variables(Simulator(load_mechanism(bundled_slider_crank())), SLIDER_CRANK_OUTPUTS))
    assert table.strip() in (ROOT / "docs" / "fmu-variables.md").read_text()


def _script(lines: list[str], marks: dict[str, str], subst: dict[str, str]) -> str:
    venv = str(Path(sys.executable).parent) + "/"
    body = []
    for line in lines:
        cmd = marks.get(_key(line), line)
        for k, v in subst.items():
            cmd = cmd.replace("{" + k + "}", v)
        body.append(cmd.replace(".venv/bin/", venv))
    return "set -euo pipefail\n" + "\n".join(body) + "\n"


def _checkout(tmp: Path) -> Path:
    """A checkout in ``tmp`` whose top-level entries link to the repository's, but for ``out``: what
    the commands write (out/demo, out/tutorial, …) stays in the temporary folder, never in the
    reader's checkout, and two blocks running at once (pytest-xdist) never share an output."""
    work = tmp / "checkout"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("out", ".git"):
            (work / entry.name).symlink_to(entry)
    return work


@pytest.mark.parametrize(("page", "k", "lines", "marks"), BLOCKS, ids=[f"{p}#{k}" for p, k, *_ in BLOCKS])
def test_block_runs(page: str, k: int, lines: list[str], marks: dict[str, str], broker: Any, tmp_path: Path) -> None:
    script = _script(lines, marks, {"tmp": str(tmp_path), "broker": broker.url, "port": str(free_port())})
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("MAKEFLAGS", None)
    proc = subprocess.run(["bash", "-c", script], cwd=_checkout(tmp_path), env=env, capture_output=True, text=True,
                          timeout=300)
    print(f"--- {page} block {k}:\n{script}--- stdout:\n{proc.stdout[-3000:]}\n--- stderr:\n{proc.stderr[-3000:]}")
    assert proc.returncode == 0, f"{page} block {k} failed:\n{script}\n{proc.stderr[-2000:]}"
