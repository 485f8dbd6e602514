"""The package's architecture (issue #16, item 4): no import cycle — counting imports inside
functions, not those only for type checking — and the engine never imports a face (the command
line, the FMU, the twin service, the dashboard, the demo, the plots and animations)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mbsd_twin"
FACES = ("mbsd_twin.cli", "mbsd_twin.cli_args", "mbsd_twin.viz", "mbsd_twin.fmi", "mbsd_twin.twin",
         "mbsd_twin.rig", "mbsd_twin.fleet", "mbsd_twin.storage", "mbsd_twin.dashboard", "mbsd_twin.demo",
         "mbsd_twin.campaign")
# the engine's layers, lowest first: a module never imports one of a higher layer
LAYERS = ("model", "physics", "compiled|solvers", "simulation", "estimation")


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
