"""Hostile inputs for the fuzz tests (tests/test_fuzz.py, sized for CI) and the long fuzz run
(benchmarks/fuzz.py): mutated mechanism files, sensor messages and twin commands, each drawn from
a ``random.Random`` (hypothesis supplies one in the tests, a seeded one in the benchmark), and the
runners that classify what the code under test did with them.

Outcomes of a mechanism file: ``ok`` (loaded, checked and simulated), ``stopped`` (the
simulation ended early with a message: a solver failure, the step or the wall-clock budget),
``located`` (a MechanismError whose every problem names the file and a place in it),
``unlocated`` (a MechanismError with a problem that does not), ``model`` (another deliberate
package error: assembly, degrees of freedom, consistency), ``crash`` (any other
exception) and ``hang`` (over the per-case time budget).
"""

from __future__ import annotations

import json
import math
import random
import time
import warnings
from pathlib import Path
from typing import Any

from mbsd_twin.errors import MbsdError, MechanismError
from mbsd_twin.model.loader import loads_mechanism
from mbsd_twin.simulation.simulate import simulate
from mbsd_twin.solvers.analysis import check
from mbsd_twin.solvers.dynamics import SolverOptions

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {p.name: p.read_text(encoding="utf-8")
           for p in sorted([*(ROOT / "examples" / "mechanisms").glob("*.toml"),
                            ROOT / "mbsd_twin" / "data" / "mechanisms" / "slider_crank.toml"])}
HOSTILE_FLOATS = [math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -5e-324, 1e30, -1e30, 1e-30, 0.0,
                  -0.0, 2.0**63, 1e-300, 1e300, 1e6, -1.0]
HOSTILE_INTS = [0, -1, 2**63, -(2**63), 2**64 + 1, 10**400, 10**30]
HOSTILE_STRINGS = ["", "ground", "x" * 1000, "crank", "💥", "a.b", "[[x]]", "\\u0000", "nan", "revolute", "spline"]
KEY_NAMES = ["name", "type", "mass", "inertia", "bodies", "points", "axis", "profile", "kind", "value", "surface",
             "body", "format", "stiffness", "zzz", "Mass", "mass ", ""]


# ----------------------------------------------------------------- TOML writer
def _key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "_-" for c in k) and k.isascii() else json.dumps(k)


def _value(x: Any) -> str:
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf") if math.isinf(x) else repr(x)
    if isinstance(x, int):
        return str(x)
    if isinstance(x, str):
        return json.dumps(x)  # a TOML basic string is a JSON string (\uXXXX escapes included)
    if isinstance(x, list):
        return "[" + ", ".join(_value(v) for v in x) + "]"
    if isinstance(x, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in x.items()) + "}"
    raise TypeError(type(x))


def toml_dumps(doc: dict[str, Any]) -> str:
    """TOML text of a document: top-level values, then each array of tables as [[section]]."""
    lines = []
    sections = {k: v for k, v in doc.items() if isinstance(v, list) and v and all(isinstance(t, dict) for t in v)}
    for k, v in doc.items():
        if k not in sections:
            lines.append(f"{_key(k)} = {_value(v)}")
    for k, tables in sections.items():
        for t in tables:
            lines.append(f"\n[[{_key(k)}]]")
            lines += [f"{_key(kk)} = {_value(vv)}" for kk, vv in t.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------- mechanism files
def _hostile_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 2 else 4)
    if kind == 0:
        return rng.choice(HOSTILE_FLOATS)
    if kind == 1:
        return rng.choice(HOSTILE_INTS)
    if kind == 2:
        return rng.choice(HOSTILE_STRINGS)
    if kind == 3:
        return rng.choice([True, False])
    if kind == 4:
        return [_hostile_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    if kind == 5:
        return {rng.choice(KEY_NAMES) or "k": _hostile_value(rng, depth + 1)}
    return [[rng.choice(HOSTILE_FLOATS), rng.choice(HOSTILE_FLOATS)] for _ in range(rng.randrange(1, 5))]


def _containers(node: Any, out: list[Any]) -> list[Any]:
    """Every dict and list in the document (the places a mutation can hit)."""
    if isinstance(node, dict | list):
        out.append(node)
        for v in node.values() if isinstance(node, dict) else node:
            _containers(v, out)
    return out


def _mutate_doc(rng: random.Random, doc: dict[str, Any]) -> None:
    place = rng.choice(_containers(doc, []))
    keys = list(place) if isinstance(place, dict) else list(range(len(place)))
    if not keys:
        return
    k = rng.choice(keys)
    op = rng.randrange(8)
    if op <= 2:  # a hostile value (most often a number: most fields are numbers)
        old = place[k]
        place[k] = rng.choice(HOSTILE_FLOATS) if isinstance(old, int | float) and op < 2 else _hostile_value(rng)
    elif op == 3 and isinstance(place, dict):
        del place[k]
    elif op == 3:
        place.pop(k)
    elif op == 4 and isinstance(place, dict):  # rename: a typo or another section's key
        place[rng.choice(KEY_NAMES) or "x"] = place.pop(k)
    elif op == 4:
        place.append(place[k])  # duplicate an element
    elif op == 5:  # nest the value one level deeper
        place[k] = [place[k]] if rng.random() < 0.5 else {"value": place[k]}
    elif op == 6 and isinstance(place[k], list) and place[k]:
        place[k] = place[k] * rng.choice([2, 50])  # longer arrays (spline points, tables)
    else:
        place[k] = rng.uniform(-1, 1) * 10.0 ** rng.randrange(-320, 309)


def _mutate_text(rng: random.Random, text: str) -> str:
    op = rng.randrange(7)
    at = rng.randrange(len(text) + 1)
    if op == 0:  # deep nesting of arrays or inline tables
        d = rng.choice([20, 40, 300, 3000])
        inner = "[" * d + "]" * d if rng.random() < 0.5 else "{a = " * d + "1" + "}" * d
        return text + f"\nx = {inner}\n"
    if op == 1:  # a long dotted key or table header
        n = rng.choice([10, 40, 5000, 50_000])
        key = ".".join(["a"] * n)
        return text + (f"\n[{key}]\n" if rng.random() < 0.5 else f"\n{key} = 1\n")
    if op == 2:  # truncated
        return text[:at]
    if op == 3:  # a duplicated line (duplicate keys and tables)
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        return "".join(lines[: i + 1] + [lines[i]] + lines[i + 1:])
    if op == 4:  # random characters
        return text[:at] + "".join(rng.choice("[]{}=\".,'#\n\\ 0e-+") for _ in range(rng.randrange(1, 8))) + text[at:]
    if op == 5:  # a huge integer literal
        return text.replace("mass = ", "mass = " + "9" * rng.choice([20, 400, 5000]) + " #", 1)
    return text[:at] + text[at + rng.randrange(1, 20):]  # a deletion


def mutate_mechanism(rng: random.Random) -> tuple[str, str]:
    """(source name, text) of a shipped mechanism file with 1–3 random mutations."""
    import tomllib

    name = rng.choice(sorted(SOURCES))
    text = SOURCES[name]
    if rng.random() < 0.7:
        doc = tomllib.loads(text)
        for _ in range(rng.randint(1, 3)):
            _mutate_doc(rng, doc)
        text = toml_dumps(doc)
    if rng.random() < 0.3:
        text = _mutate_text(rng, text)
    return name, text


def _located(err: MechanismError, source: str) -> bool:
    return bool(err.problems) and all(p.location == source or p.location.startswith(f"{source}: ")
                                      for p in err.problems)


def run_mechanism(text: str, source: str = "fuzz.toml", t_end: float = 0.02, max_steps: int = 2000,
                  time_limit: float = 2.0) -> tuple[str, str]:
    """Load, check and briefly simulate a mechanism text: (outcome, detail); see the module doc."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # plausibility and numpy warnings: expected here
            mech = loads_mechanism(text, source)
            check(mech)
            opts = SolverOptions(max_steps=max_steps, initial_velocity="project")
            res = simulate(mech, t_end, t_end / 2, options=opts, time_limit=time_limit)
    except MechanismError as exc:
        return ("located" if _located(exc, source) else "unlocated"), str(exc)[:400]
    except MbsdError as exc:
        return "model", f"{type(exc).__name__}: {str(exc)[:200]}"
    except Exception as exc:  # noqa: BLE001 - a crash is what the fuzz run counts
        return "crash", f"{type(exc).__name__}: {str(exc)[:300]}"
    return ("stopped", res.message) if res.status < 0 else ("ok", "")


def timed(fn: Any, *args: Any, budget: float) -> tuple[str, str, float]:
    """``fn(*args)`` → (outcome, detail, seconds); the outcome becomes ``hang`` over ``budget``."""
    t0 = time.perf_counter()
    outcome, detail = fn(*args)
    dt = time.perf_counter() - t0
    return ("hang" if dt > budget else outcome), detail, dt


# ----------------------------------------------------------------- sensor messages and commands
def _hostile_number(rng: random.Random) -> Any:
    return rng.choice([*HOSTILE_FLOATS[3:], *HOSTILE_INTS, True, None, "1.0", [], {}])


def sensor_message(rng: random.Random, valid: dict[str, Any]) -> bytes:
    """A hostile variant of the valid sensor message ``valid``: schema-valid with hostile values,
    broken fields, or bytes that are not JSON at all."""
    msg = json.loads(json.dumps(valid))
    op = rng.randrange(10)
    if op <= 3:  # schema-valid, hostile numbers in a channel
        name = rng.choice(sorted(msg["ch"]))
        msg["ch"][name] = [rng.choice(HOSTILE_FLOATS[3:] + [v * 10.0 ** rng.randrange(300) for v in (1, -1)])
                           for _ in msg["ch"][name]]
    elif op == 4:
        msg[rng.choice(["seq", "t0", "dt", "n", "v", "asset", "ch"])] = _hostile_number(rng)
    elif op == 5:
        del msg[rng.choice(sorted(msg))]
    elif op == 6:
        msg["ch"][rng.choice(["x" * 300, "", "theta", "💥"])] = [_hostile_number(rng)] * rng.randrange(5)
    elif op == 7:
        return json.dumps(msg).replace("[", "[" * rng.choice([1, 2, 5000]), 1).encode()
    elif op == 8:
        raw = bytearray(json.dumps(msg).encode())
        for _ in range(rng.randint(1, 5)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    else:
        return rng.choice([b"", b"null", b"NaN", b"[]", b'{"v": 1e999}', b"\xff\xfe", b"{" * 100_000,
                           json.dumps(msg).encode() * 3, b'{"v":1,"ch":' + b"[" * 2000])
    return json.dumps(msg, allow_nan=True).encode()


COMMANDS = ["reset", "set_param", "pause", "resume", "", "RESET", "set_param ", "x" * 500, "__init__", "step"]
PARAMS = ["piston.mass", "crank.inertia", "rod.mass", "solver.max_step", "solver.rtol", "motor_torque.bias",
          "main_bearing.viscous_friction", "crank.cg_x", "no.such", "", "x" * 5000, "piston.mass "]


def command_call(rng: random.Random) -> tuple[str, Any]:
    """(name, args) of a hostile command: unknown names, missing or mistyped arguments, absurd values."""
    name = rng.choice(COMMANDS)
    op = rng.randrange(5)
    if op == 0:
        return name, {}
    if op == 1:
        return name, rng.choice([None, [], "x", 1, {"name": None}, {"value": 1.0}])
    value = rng.choice([*HOSTILE_FLOATS, *HOSTILE_INTS, "1", None, True, [1.0], rng.uniform(0.01, 10)])
    return "set_param" if op < 4 else name, {"name": rng.choice(PARAMS), "value": value}
