"""Writing parameter values into a mechanism file's text, keeping the user's comments and layout.

A parameter ``ITEM.FIELD`` (see :func:`mbsd_twin.simulation.ports.model_parameters`) lives in the
``[[bodies]]``, ``[[joints]]`` or ``[[loads]]`` table whose ``name`` is ITEM, under the key the field
belongs to (``mass``, ``inertia``, ``cg``, ``points``, ``viscous_friction``, ``stiffness``,
``damping``). Only that key's value is replaced (its trailing comment kept); an absent key is
inserted after the table's last key. The new value of the whole key (an array for ``cg_x`` or
``p1_y``) is read from the mechanism with the parameters applied, so the file and the model agree.
The result is checked by loading it back and comparing every written parameter.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from ..atomic import write_atomic
from ..model.loader import loads_mechanism
from ..model.model import Mechanism
from ..simulation.ports import apply_parameters, model_parameters

SECTIONS = (("bodies", "bodies"), ("joints", "joints"), ("loads", "loads"))
FIELD_KEYS = {"cg_x": "cg", "cg_y": "cg"}
_TABLE = re.compile(r"^\s*\[\[\s*([A-Za-z_]+)\s*\]\]\s*(#.*)?$")
_HEADER = re.compile(r"^\s*\[")


def _key_of(field: str) -> str:
    if re.fullmatch(r"p[12]_[xy]", field):
        return "points"
    return FIELD_KEYS.get(field, field)


def _locate(mech: Mechanism, name: str) -> tuple[str, str, str]:
    """(section, item name, key) of the parameter ``name``."""
    item, field = name.rsplit(".", 1)
    for section, attr in SECTIONS:
        if any(x.name == item for x in getattr(mech, attr)):
            return section, item, _key_of(field)
    raise ValueError(f"parameter {name!r}: no body, joint or load named {item!r}")


def toml_value(v: Any) -> str:
    """A float, or a (nested) sequence of floats, as TOML (round-trip float reprs)."""
    if isinstance(v, tuple | list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    x = float(v)
    if not math.isfinite(x):
        raise ValueError(f"cannot write the non-finite value {x!r}")
    return repr(x)


def _table_span(lines: list[str], section: str, item: str, source: str) -> tuple[int, int]:
    """[first, end) line range of the ``[[section]]`` table whose name is ``item``."""
    starts = [i for i, ln in enumerate(lines) if _HEADER.match(ln)]
    for k, i in enumerate(starts):
        m = _TABLE.match(lines[i])
        if not m or m.group(1) != section:
            continue
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        for ln in lines[i + 1:end]:
            kv = re.match(r"^\s*name\s*=\s*(.+)$", ln)
            if kv and tomllib.loads(f"v = {kv.group(1)}")["v"] == item:
                return i, end
    raise ValueError(f"{source}: no [[{section}]] table with name = {item!r} (written as a [[{section}]] "
                     "table with one key per line?)")


def _set_key(lines: list[str], span: tuple[int, int], key: str, value: str, source: str) -> None:
    pattern = re.compile(rf"^(\s*{re.escape(key)}\s*=\s*)(.*?)(\s*#.*)?$")
    last = span[0]
    for i in range(span[0] + 1, span[1]):
        stripped = lines[i].strip()
        if stripped and not stripped.startswith("#"):
            last = i
        m = pattern.match(lines[i])
        if m is None:
            continue
        try:
            tomllib.loads(f"v = {m.group(2)}")
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"{source}: line {i + 1}: cannot edit {key!r} (the value must fit on its line)") from exc
        comment = m.group(3) or ""
        if comment:  # keep the comment's column when the new value leaves room
            pad = len(comment) - len(comment.lstrip()) - (len(value) - len(m.group(2)))
            comment = " " * max(pad, 1) + comment.lstrip()
        lines[i] = m.group(1) + value + comment
        return
    lines.insert(last + 1, f"{key} = {value}")


def set_parameters(text: str, mech: Mechanism, values: Mapping[str, float], source: str = "<mechanism>") -> str:
    """``text`` (the file ``mech`` was loaded from) with the parameters ``values`` written in."""
    changed = apply_parameters(mech, dict(values))
    lines = text.split("\n")
    for name in values:
        section, item, key = _locate(mech, name)
        obj = next(x for x in getattr(changed, section) if x.name == item)
        _set_key(lines, _table_span(lines, section, item, source), key, toml_value(getattr(obj, key)), source)
    return "\n".join(lines)


def _check_written(text: str, values: Mapping[str, float], source: str) -> None:
    params = model_parameters(loads_mechanism(text, source=source))
    for name, v in values.items():
        got = params[name][0].value
        if got != float(v):
            raise ValueError(f"{source}: {name} reads back as {got!r}, not {float(v)!r}")


def write_mechanism(path: str, text: str, mech: Mechanism, values: Mapping[str, float],
                    header: str = "") -> str:
    """Write ``text`` with ``values`` (and the comment lines ``header`` on top) to ``path``
    atomically, after checking that it loads and holds the values; the text written."""
    body = set_parameters(text, mech, values, source=mech.source)
    comment = "".join(f"# {ln}\n" for ln in header.splitlines())
    out = comment + body
    _check_written(out, values, path)
    write_atomic(path, out)
    return out


