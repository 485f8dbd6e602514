"""Reading the newer element kinds from a mechanism file: the curves of ``cam`` joints (see
:mod:`mbsd_twin.model.surface_io`), ``contact`` loads (see :mod:`mbsd_twin.physics.contact`) and
``rotating_frame`` loads (see :mod:`mbsd_twin.physics.frames`). Uses the field readers of
:mod:`mbsd_twin.model.toml_reader`; :mod:`mbsd_twin.model.loader` calls it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .model import ContactSpec, Load
from .surface_io import surface_from_table
from .toml_reader import ZERO, Reader, at, toml_kind


def curves(r: Reader, t: Mapping[str, Any], loc: str, key: str, count: int,
           kinds: tuple[str, ...]) -> tuple[Any, ...]:
    """``count`` curve tables (see ``surface_io``) under ``key``; () when any is broken (reported)."""
    raw, where = t[key], at(loc, key)
    if not isinstance(raw, list) or len(raw) != count:
        r.report(where, f"expected {count} curve tables [{{ kind = ... }}, ...], got {toml_kind(raw)}")
        return ()
    out = []
    for k, item in enumerate(raw):
        surf, problems = surface_from_table(item, kinds)
        for sub, message in problems:
            r.report(f"{where}[{k}]" + (f".{sub}" if sub else ""), message)
        out.append(surf)
    if any(s is None for s in out):
        r.bad.add(where)
        return ()
    return tuple(out)


def contact_load(r: Reader, t: Mapping[str, Any], loc: str) -> Load:
    surface = None
    if "surface" in t:
        surface, problems = surface_from_table(t["surface"])
        for key, message in problems:
            r.report(at(at(loc, "surface"), key) if key else at(loc, "surface"), message)
    vertices: tuple[tuple[float, float], ...] = ()
    if "vertices" in t:
        raw = t["vertices"]
        n = len(raw) if isinstance(raw, list) else 0
        vertices = r.points(t, loc, "vertices", max(n, 1)) if n else ()
        if not n:
            r.report(at(loc, "vertices"), "expected an array of [x, y] polygon vertices")
    spec = ContactSpec(surface=surface, radius=r.number(t, loc, "radius", 0.0),
                       center=r.vector(t, loc, "center", ZERO), vertices=vertices,
                       friction=r.number(t, loc, "friction", 0.0),
                       slip_velocity=r.number(t, loc, "slip_velocity", 1e-3))
    if surface is None:
        r.bad.add(at(loc, "surface"))
    return Load(name=r.string(t, loc, "name"), type="contact", bodies=r.names(t, loc, "bodies", 2),
                stiffness=r.number(t, loc, "stiffness", 0.0), damping=r.number(t, loc, "damping", 0.0),
                contact=spec)


def frame_load(r: Reader, t: Mapping[str, Any], loc: str) -> Load:
    raw = t.get("bodies", [])
    ok = isinstance(raw, list) and all(isinstance(x, str) for x in raw)
    if not ok:
        r.report(at(loc, "bodies"), "expected an array of body names")
    r.field_renames[at(loc, "value")] = at(loc, "rate")
    r.field_renames[at(loc, "points")] = at(loc, "center")
    return Load(name=r.string(t, loc, "name"), type="rotating_frame", bodies=tuple(raw) if ok else (),
                value=r.number(t, loc, "rate", 0.0), points=(r.vector(t, loc, "center", ZERO),))
