"""The API reference (``make docs``: pdoc over the docstrings) builds and documents every public name,
and the docstring examples of the public API run as written."""

from __future__ import annotations

import doctest
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mbsd_twin
from mbsd_twin.model import builder

ROOT = Path(__file__).resolve().parents[1]


def test_mechanism_builder_docstring_example_runs() -> None:
    """The class docstring's pendulum: built, simulated 0.1 s, fallen by ½·(m·g·r / I_pivot)·t²."""
    assert builder.MechanismBuilder.__doc__ and ">>> " in builder.MechanismBuilder.__doc__
    finder = doctest.DocTestFinder(recurse=False)
    [test] = finder.find(builder.MechanismBuilder, "MechanismBuilder", globs={})
    result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
    assert result.attempted >= 5 and result.failed == 0


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_docs_documents_every_public_name(tmp_path: Path) -> None:
    venv = Path(sys.executable).parent.parent
    out = tmp_path / "api"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("MAKEFLAGS", None)
    proc = subprocess.run(["make", "-o", "pyproject.toml", "docs", f"VENV={venv}", f"API_DIR={out}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    page = (out / "mbsd_twin.html").read_text(encoding="utf-8")
    assert (out / "index.html").exists() and f"mbsd-twin {mbsd_twin.__version__}" in page
    documented = set(re.findall(r'<section id="([^"]+)">', page))
    missing = [name for name in mbsd_twin.__all__ if name not in documented]
    assert not missing, f"public names without an entry in the API reference: {missing}"
    assert (out / "mbsd_twin" / "fmi" / "build.html").exists()  # the submodules too
    docstring = re.search(r'<section id="MechanismBuilder">.*?</section>', page, re.S)
    assert docstring and "A mechanism assembled in Python" in docstring.group(0)
