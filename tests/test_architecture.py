"""The package's architecture (issue #16, item 4; issue #35; docs/architecture.md): no import cycle —
counting imports inside functions, not those only for type checking — the engine never imports a
face (the command line, the FMU, the twin service and its sub-systems rig, fleet and storage, the
dashboard, the demo, the plots and animations, the campaigns), every package is placed (an engine
layer, a face or shared), a face imports another face only in the directions of FACE_IMPORTS (or
at the wiring points of WIRING), a face's sub-system is a folder, not a file prefix, and no two
C sources of the FMUs depend on each other in a circle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mbsd_twin"
FACES = ("mbsd_twin.cli", "mbsd_twin.cli_args", "mbsd_twin.viz", "mbsd_twin.fmi", "mbsd_twin.twin",
         "mbsd_twin.rig", "mbsd_twin.fleet", "mbsd_twin.storage", "mbsd_twin.dashboard", "mbsd_twin.demo",
         "mbsd_twin.campaign")
# the engine's layers, lowest first: a module never imports one of a higher layer
LAYERS = ("model", "physics", "compiled|solvers", "simulation", "estimation")
# the API and helpers used by all, on top
SHARED = ("mbsd_twin", "mbsd_twin.errors", "mbsd_twin.atomic", "mbsd_twin.progress", "mbsd_twin.warmup")
# The faces a face may import (by top-level name). The twin face's sub-systems stand in one order:
# the fleet on the rig and storage, both on the twin service, which imports neither (but at WIRING).
FACE_IMPORTS: dict[str, set[str]] = {
    "cli": {"cli_args", "viz", "fmi", "twin", "rig", "fleet", "storage", "dashboard", "demo", "campaign"},
    "cli_args": set(),
    "demo": {"viz", "fmi", "twin", "rig", "dashboard"},  # it composes them all
    "campaign": {"fmi", "twin"},
    "fleet": {"twin", "rig", "storage"},
    "rig": {"twin"},  # the rig speaks the twin's contract (protocol, broker link, config types)
    "storage": {"twin"},  # storage persists the twin: its configuration, core and redaction
    "dashboard": {"twin", "storage", "viz"},  # mounted on the twin service
    "twin": {"cli_args"},
    "fmi": {"cli_args"},
    "viz": set(),
}
# A module that plugs another face in: it may import these faces beyond FACE_IMPORTS.
WIRING: dict[str, set[str]] = {
    "mbsd_twin.twin.cli": {"rig", "storage"},  # `twin rig`, `twin identify --rig`, `twin history`
    "mbsd_twin.twin.identify": {"rig"},  # `twin identify`: the filter over the synthetic rig's motion
    "mbsd_twin.twin.service": {"storage", "dashboard"},  # the history writer; the dashboard's mount
    "mbsd_twin.fmi.validation": {"viz"},  # `fmu validate --plot`
    "mbsd_twin.viz.units": {"dashboard"},  # the dashboard's unit table
    "mbsd_twin.viz.tables": {"storage"},  # the history export's columns
    "mbsd_twin.viz.cli": {"twin"},  # `plot --config`
}
# Module names that still carry a sibling's name as a prefix (a sub-system by prefix): to be folders.
PREFIX_NAMED = {"mbsd_twin.cli_args", "mbsd_twin.fmi.native_build", "mbsd_twin.fmi.slave_logic",
                "mbsd_twin.fmi.worker_shm"}
C_DIRS = (PACKAGE / "fmi" / "native_fmu", PACKAGE / "fmi" / "standalone" / "c")


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    return {id(x) for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
            for x in ast.walk(n)}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package modules ``name`` imports at run time (anywhere in the file)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_checking_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in modules else base)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def _is_face(name: str) -> bool:
    return any(name == f or name.startswith(f + ".") for f in FACES)


def test_the_detector_finds_a_cycle_and_a_clean_graph() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_no_import_cycle() -> None:
    graph = _graph()
    assert len(graph) > 100 and "mbsd_twin.simulation.simulator" in graph["mbsd_twin.fmi.native"]
    assert _cycles(graph) == []


def test_the_engine_never_imports_a_face() -> None:
    graph = _graph()
    wrong = {m: sorted(x for x in deps if _is_face(x)) for m, deps in graph.items() if not _is_face(m)}
    assert {m: d for m, d in wrong.items() if d} == {}


def _layer(name: str) -> int:
    """The layer index of a module (-1: not in a layer, e.g. ``errors`` or a face)."""
    part = name.split(".")[1] if name.count(".") else ""
    return next((k for k, names in enumerate(LAYERS) if part in names.split("|")), -1)


def test_layers_only_import_downwards() -> None:
    """model → physics → compiled and solvers → simulation → estimation: the data flow of
    docs/architecture.md, in the package layout (``compiled`` and ``solvers`` share a level: the
    compiled stepper is a solver)."""
    graph = _graph()
    up = sorted((m, d) for m, deps in graph.items() for d in deps if -1 < _layer(m) < _layer(d))
    assert up == []
    assert sorted(_layer(f"mbsd_twin.{p}.x") for p in ("model", "physics", "compiled", "solvers", "simulation",
                                                       "estimation")) == [0, 1, 2, 2, 3, 4]


def _top(name: str) -> str:
    return name.split(".")[1] if name.count(".") else name


def _package_names() -> list[str]:
    """mbsd_twin's own modules and packages (the top level)."""
    return sorted({p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
                  | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()})


def test_every_package_is_placed() -> None:
    """Each top-level module or package is an engine layer, a face or shared: a new one is placed."""
    layers = {x for names in LAYERS for x in names.split("|")}
    faces = {_top(f) for f in FACES}
    shared = {_top(s) for s in SHARED if s != "mbsd_twin"}
    assert set(FACE_IMPORTS) == faces
    assert [n for n in _package_names() if n not in layers | faces | shared] == []
    for sub in ("rig", "fleet", "storage", "twin"):
        assert f"mbsd_twin.{sub}" in _modules(), sub


def _face_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, imported module) of one face importing another face against FACE_IMPORTS and WIRING."""
    wrong = []
    for m, deps in graph.items():
        if not _is_face(m):
            continue
        for d in deps:
            if _is_face(d) and _top(d) != _top(m) and _top(d) not in FACE_IMPORTS[_top(m)] | WIRING.get(m, set()):
                wrong.append((m, d))
    return sorted(wrong)


def test_faces_import_each_other_only_as_documented() -> None:
    """The twin service imports neither its rig nor its fleet nor storage (but at its wiring points),
    the rig and storage never the fleet or each other, and nothing but the command line imports the
    fleet; the other faces as FACE_IMPORTS says."""
    graph = _graph()
    assert _face_imports(graph) == []
    assert _cycles({f: FACE_IMPORTS[f] for f in ("twin", "rig", "storage", "fleet")} | {"cli_args": set()}) == []
    assert [m for m, deps in graph.items() for d in deps if _top(d) == "fleet" and _top(m) not in ("fleet", "cli")] \
        == []
    for m in WIRING:
        assert m in graph, f"WIRING names {m}, which is gone"


def test_the_face_rule_fails_on_a_forbidden_import() -> None:
    graph = {"mbsd_twin.twin.core": {"mbsd_twin.rig.synthetic"}, "mbsd_twin.rig.synthetic": {"mbsd_twin.twin.protocol"},
             "mbsd_twin.twin.cli": {"mbsd_twin.rig.file"}, "mbsd_twin.storage.history.writer": {"mbsd_twin.fleet.cli"}}
    assert _face_imports(graph) == [("mbsd_twin.storage.history.writer", "mbsd_twin.fleet.cli"),
                                    ("mbsd_twin.twin.core", "mbsd_twin.rig.synthetic")]


def _prefix_named(folder: Path) -> list[str]:
    """Modules of ``folder`` named after a sibling module or package, or after the folder, plus '_'
    (``fleet_config.py`` beside ``fleet.py``; ``rig/rig_file.py``)."""
    names = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"} | \
        {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    return sorted(n for n in names if any(n.startswith(o + "_") for o in names | {folder.name} if o != n))


def test_a_sub_system_is_a_folder_not_a_file_prefix() -> None:
    """In the faces, no module carries a sibling's (or its folder's) name as a prefix: a sub-system
    of a face is a folder (docs/architecture.md); PREFIX_NAMED lists the ones still to move."""
    found = set()
    for face in {_top(f) for f in FACES}:
        root = PACKAGE / face
        folders = [root, *(p for p in root.rglob("*") if (p / "__init__.py").exists())] if root.is_dir() else [PACKAGE]
        for folder in folders:
            pkg = ".".join(folder.relative_to(PACKAGE.parent).parts)
            found |= {f"{pkg}.{n}" for n in _prefix_named(folder) if _is_face(f"{pkg}.{n}")}
    assert found == PREFIX_NAMED
    assert _prefix_named(PACKAGE / "twin") == [] and _prefix_named(PACKAGE / "fleet") == []


# ------------------------------------------------------------------ C sources of the FMUs
_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'", re.S)
_C_NAME = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_C_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
_C_KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "defined", "_Static_assert", "__attribute__"}


def _c_scan(text: str) -> tuple[set[str], set[str]]:
    """The functions a C file defines with external linkage, and the names it calls (but those it
    defines itself)."""
    code = _C_COMMENT.sub(lambda m: " " if m.group(0)[0] == "/" else '""', text)
    code = re.sub(r"^\s*#.*?(?<!\\)$", "", code, flags=re.M)  # preprocessor lines (macros are not calls)
    defined, own, called = set(), set(), set()
    depth = 0
    pos = 0
    last_end = 0  # where the current top-level declaration began
    while pos < len(code):
        ch = code[pos]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                last_end = pos + 1
        elif ch == ";" and depth == 0:
            last_end = pos + 1
        elif ch.isalpha() or ch == "_":
            m = _C_NAME.match(code, pos)
            if m is None:
                pos = re.compile(r"\w*").match(code, pos).end()  # type: ignore[union-attr]
                continue
            name = m.group(1)
            if depth > 0 and name not in _C_KEYWORDS:
                called.add(name)
            elif depth == 0:
                close, level = m.end(), 1
                while close < len(code) and level:
                    level += {"(": 1, ")": -1}.get(code[close], 0)
                    close += 1
                rest = code[close:].lstrip()
                rest = re.sub(r"^__attribute__\s*\(\(.*?\)\)\s*", "", rest, flags=re.S)
                if rest.startswith("{"):
                    own.add(name)
                    if not re.search(r"\bstatic\b", code[last_end:pos]):
                        defined.add(name)
                pos = close
                continue
            pos = m.end()
            continue
        pos += 1
    return defined, called - own


def _c_graph(dirs: tuple[Path, ...], only: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """.c file → the .c files it depends on, among the sources of one library (those of ``dirs``,
    or only those named): it calls a function defined there (with external linkage), or it
    includes (directly or through other headers) a header implemented there — the header of the
    same name (``worker_link.h`` is ``worker_link.c``'s). A header with no source of its own name
    (the FMI standard's, which declare the API the library exports) ties to none."""
    sources = {p.name: p for d in dirs for p in sorted(d.glob("*.c")) if not only or p.name in only}
    headers = {p.name: p for d in dirs for p in sorted(d.glob("*.h"))}
    scans = {name: _c_scan(p.read_text(encoding="utf-8", errors="replace")) for name, p in sources.items()}
    definer: dict[str, set[str]] = {}
    for name, (defined, _) in scans.items():
        for fn in defined:
            definer.setdefault(fn, set()).add(name)

    def includes(path: Path, seen: set[str]) -> set[str]:
        for inc in _C_INCLUDE.findall(path.read_text(encoding="utf-8", errors="replace")):
            base = Path(inc).name
            if base in headers and base not in seen:
                seen.add(base)
                includes(headers[base], seen)
        return seen

    graph: dict[str, set[str]] = {}
    for name, path in sources.items():
        deps = {c for fn in scans[name][1] for c in definer.get(fn, set())}
        deps |= {h[:-2] + ".c" for h in includes(path, set()) if h[:-2] + ".c" in sources}
        graph[name] = deps - {name}
    return graph


def _c_libraries() -> dict[str, dict[str, set[str]]]:
    """The FMU libraries, each its sources: the host-independent ones for FMI 2.0 and 3.0
    (native_fmu/, fmi/native_build.py) and the standalone one (standalone/c/ with the FMI files of
    native_fmu/ it shares, fmi/standalone/build.py)."""
    from mbsd_twin.fmi.native_build import COMMON_SOURCES, SOURCES
    from mbsd_twin.fmi.standalone.build import FMI_SOURCES

    native, standalone = C_DIRS
    assert {p.name for p in native.glob("*.c")} == {*COMMON_SOURCES, *SOURCES["2.0"], *SOURCES["3.0"]}
    sa = tuple(p.name for p in standalone.glob("*.c")) + tuple(p.name for v in FMI_SOURCES.values() for p in v
                                                                 if p.parent == native)
    return {"native 2.0": _c_graph((native,), SOURCES["2.0"]), "native 3.0": _c_graph((native,), SOURCES["3.0"]),
            "standalone": _c_graph((standalone, native), sa)}


def test_no_circle_between_the_fmu_c_sources() -> None:
    libs = _c_libraries()
    native, standalone = libs["native 3.0"], libs["standalone"]
    assert {"worker_shm.c", "worker_frames.c"} <= native["worker_link.c"]  # the detector sees calls and includes
    assert {"sa_core.c", "fmi2_misc.c"} <= set(standalone) and "sa_core.c" in standalone["sa_fmi2.c"]
    assert {name: _cycles(graph) for name, graph in libs.items()} == {name: [] for name in libs}


def test_the_c_detector_finds_a_circle(tmp_path: Path) -> None:
    """A call one way and an include of the other's header the other way is a circle; a static
    function of the same name is no tie; the FMI headers (no source of their name) tie to none."""
    (tmp_path / "a.h").write_text("int a_run(int x);\n")
    (tmp_path / "a.c").write_text('#include "a.h"\n/* b_call(); */\nint a_run(int x) { return b_call(x) + 1; }\n')
    (tmp_path / "b.c").write_text('#include "a.h"\n#include "fmi2Functions.h"\nstatic int helper(void) { return 2; }\n'
                                  "int b_call(int x) {\n    return x * helper();\n}\n")
    (tmp_path / "c.c").write_text('#include "fmi2Functions.h"\nstatic int a_run(int x) { return x; }\n'
                                  "int fmi2Main(void) { return a_run(1); }\n")
    (tmp_path / "fmi2Functions.h").write_text("int fmi2Main(void);\n")
    graph = _c_graph((tmp_path,))
    assert graph == {"a.c": {"b.c"}, "b.c": {"a.c"}, "c.c": set()}
    assert _cycles(graph) == [["a.c", "b.c"]]
