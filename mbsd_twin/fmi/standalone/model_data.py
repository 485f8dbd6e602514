"""One mechanism's data for the standalone FMU's library: the compiled Simulator's arrays right
after construction (integrator state, inputs, packed model, scratch, options, output rows, energy
baseline) and the FMU's value references, as a C source (``model_data.c``) defining the
``SaModel`` of ``c/sa_engine.h`` (and its second layout with every joint's friction entry).
Numbers are written as C99 hexadecimal floating constants: the library starts from exactly the
Simulator's bits."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import MbsdError
from ...model.model import Mechanism
from ...simulation.simulator import Simulator
from .parameters import Applied, applied, friction_layout, layout_friction_entries, reference_rows


class StandaloneUnsupported(MbsdError, ValueError):
    """The mechanism cannot go into a standalone FMU; the message names the element."""


def python_callables(mech: Mechanism) -> list[str]:
    """The elements of ``mech`` that call Python: generalized loads and callable profiles."""
    found = [f"load {ld.name!r} (type {ld.type})" for ld in mech.loads if ld.type == "generalized"]
    found += [f"load {ld.name!r} (callable profile)" for ld in mech.loads
              if getattr(ld.profile, "kind", "") == "callable"]
    found += [f"driver {d.name!r} (callable profile)" for d in getattr(mech, "drivers", ())
              if getattr(d.profile, "kind", "") == "callable"]
    return found


def check_mechanism(mech: Mechanism) -> Simulator:
    """The Simulator of ``mech``; :class:`StandaloneUnsupported` unless it runs on the compiled
    kernels (a Python callable is named before anything is built)."""
    calls = python_callables(mech)
    if calls:
        raise StandaloneUnsupported(f"{mech.source}: a standalone FMU cannot call Python: {'; '.join(calls)}")
    sim = Simulator(mech)
    if sim.backend != "compiled":
        try:
            Simulator(mech, _compiled_options(sim))
        except MbsdError as exc:
            raise StandaloneUnsupported(f"a standalone FMU runs the compiled engine only: {exc}") from exc
        raise StandaloneUnsupported(f"{mech.source}: the Simulator does not run on the compiled engine")
    return sim


def _compiled_options(sim: Simulator) -> Any:
    from dataclasses import replace

    return replace(sim.options, backend="compiled")


def _c_floats(a: Any) -> str:
    vals = np.ascontiguousarray(a, dtype=float).ravel()
    return ", ".join(float(v).hex() if np.isfinite(v) else ("(1.0/0.0)" if v > 0 else "(-1.0/0.0)")
                     if not np.isnan(v) else "(0.0/0.0)" for v in vals) or "0"


def _c_ints(a: Any) -> str:
    vals = np.ascontiguousarray(a, dtype=np.int64).ravel()
    return ", ".join(f"{int(v)}LL" for v in vals) or "0"


def _c_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def value_references(model_description: bytes) -> dict[str, tuple[int, str]]:
    """name → (value reference, causality) of the FMU's variables (FMI 2.0 or 3.0)."""
    md = ET.fromstring(model_description)
    mv = md.find("ModelVariables")
    if mv is None:
        raise ValueError("modelDescription.xml has no ModelVariables")
    return {v.get("name", ""): (int(v.get("valueReference", "0")), v.get("causality", "local")) for v in mv}


def _parameter_arrays(sim: Simulator, pars: Sequence[Any], how: dict[str, Applied], p: str) -> list[str]:
    """The C arrays (names prefixed ``p``) of how each parameter is applied (``how``:
    ``parameters.applied``) and of the initial state's assembly: the mechanism's guess, its pinned
    coordinates, the start values' places, the springs' free lengths and angles left to the pose."""
    n = sim.system.n_coord
    held = list(sim._starts.index.values())
    offsets = np.cumsum([0] + [len(how[v.name].entries) for v in pars])
    sd, rs = reference_rows(sim)
    ints = {"par_kind": [how[v.name].kind for v in pars], "par_strict": [int(how[v.name].strict) for v in pars],
            "par_asm": [int(how[v.name].assemble) for v in pars]}
    i64s = {"par_index": [how[v.name].index for v in pars], "par_off": offsets,
            "par_idx": [k for v in pars for k in how[v.name].entries], "pinned": sim.system.pinned,
            "hold_q": [k for k in held if k < n], "hold_v": [k - n for k in held if k >= n], "ref_sd": sd,
            "ref_rs": rs}
    lines = [f"static const int {p}{k}[] = {{{', '.join(map(str, v)) or '0'}}};" for k, v in ints.items()]
    lines += [f"static const i64 {p}{k}[] = {{{_c_ints(v)}}};" for k, v in i64s.items()]
    lines += [f"static const double {p}par_min[] = {{{_c_floats([how[v.name].minimum for v in pars])}}};",
              f"static const double {p}q_guess[] = {{{_c_floats(sim.system.q0)}}};",
              f"static const double {p}v_guess[] = {{{_c_floats(sim.system.v0)}}};"]
    return lines


def _model(sim: Simulator, table: Sequence[Any], vrs: dict[str, tuple[int, str]], how: dict[str, Applied],
           name: str, p: str, base: Simulator, fb: Any) -> list[str]:
    """The C definition of the ``SaModel`` ``name`` (its arrays' names prefixed ``p``): the packed
    model of ``sim`` with the float buffer ``fb``, the state, inputs and outputs of ``base``."""
    st = base._stepper
    layout = sim._stepper
    names = base.output_names()
    ins = [v for v in table if v.causality == "input"]
    outs = [v for v in table if v.causality == "output"]
    pars = [v for v in table if v.causality == "parameter"]
    ny = (len(st._S) - 8) // 11
    time_vr = next((vr for _, (vr, causality) in vrs.items() if causality == "independent"), -1)
    arrays = {"S0": _c_floats(st._S), "u0": _c_floats(st._u), "fb": _c_floats(fb), "wb0": _c_floats(layout._wb),
              "ob": _c_floats(st._ob), "in_start": _c_floats([v.start or 0.0 for v in ins]),
              "par_start": _c_floats([v.start or 0.0 for v in pars])}
    ints = {"ib": _c_ints(layout._ib), "ri": _c_ints(base._react_idx), "er": _c_ints(base._effort_rows),
            "in_slot": _c_ints([st.names.index(v.name) for v in ins]),
            "out_pick": _c_ints([names.index(v.name) for v in outs])}
    vr = {"in_vr": [vrs[v.name][0] for v in ins], "out_vr": [vrs[v.name][0] for v in outs],
          "par_vr": [vrs[v.name][0] for v in pars]}
    lines = [f"static const double {p}{k}[] = {{{v}}};" for k, v in arrays.items()]
    lines += [f"static const i64 {p}{k}[] = {{{v}}};" for k, v in ints.items()]
    lines += [f"static const uint32_t {p}{k}[] = {{{', '.join(f'{x}u' for x in v) or '0'}}};" for k, v in vr.items()]
    lines += _parameter_arrays(sim, pars, how, p)
    lines.append(f"static const char *const {p}par_name[] = {{{', '.join(_c_str(v.name) for v in pars) or '0'}}};")
    sizes = (len(st._S), len(st._u), len(layout._ib), len(fb), len(layout._wb), len(st._ob), len(base._react_idx),
             len(base._effort_rows), len(names), ny)
    held = list(base._starts.index.values())
    n = base.system.n_coord
    counts = (n, len(base.system.pinned), sum(k < n for k in held), sum(k >= n for k in held))
    sd, rs = reference_rows(sim)
    refs = f"{p}ref_sd, {p}ref_rs, {len(sd)}LL, {len(rs)}LL"
    lines.append(f"{'' if p == '' else 'static '}const SaModel {name} = {{" + ", ".join(map(str, sizes)) + ",")
    lines.append(f"    {p}S0, {p}u0, {p}fb, {p}wb0, {p}ob, {p}ib, {p}ri, {p}er, " + float(base._e0).hex() + ",")
    lines.append(f"    {len(ins)}u, {len(outs)}u, {len(pars)}u, {p}in_vr, {p}out_vr, {p}par_vr, {p}in_slot, "
                 f"{p}out_pick, {p}in_start, {p}par_start, {p}par_kind, {p}par_name, {time_vr}LL, {p}par_index, "
                 f"{p}par_min, {p}par_strict, {names.index('energy.total')}LL,")
    lines.append(f"    {p}par_off, {p}par_idx, {p}par_asm, " + ", ".join(f"{c}LL" for c in counts)
                 + f", {p}q_guess, {p}v_guess, {p}pinned, {p}hold_q, {p}hold_v, {int(len(base.system.drivers) > 0)}, "
                 + refs + "};")
    return lines


def c_source(sim: Simulator, table: Sequence[Any], vrs: dict[str, tuple[int, str]]) -> str:
    """The ``model_data.c`` of the FMU whose variables are ``table`` (``variables.fmu_variables``)
    and value references ``vrs``: ``MBSD_MODEL`` (the mechanism as built) and, when a revolute or
    prismatic joint was built without friction, ``MBSD_MODEL_FULL`` (``parameters.friction_layout``:
    the same with every such friction entry present, at 0; else NULL)."""
    names = [v.name for v in table if v.causality == "parameter"]
    full = friction_layout(sim)
    lines = ['#include "sa_engine.h"', ""]
    lines += _model(sim, table, vrs, applied(sim, names, full is not None), "MBSD_MODEL", "", sim, sim._stepper._fb)
    if full is None:
        lines.append("const SaModel *const MBSD_MODEL_FULL = 0;")
    else:
        fb = full._stepper._fb.copy()
        fb[layout_friction_entries(sim, full)] = 0.0
        lines += _model(full, table, vrs, applied(full, names), "mbsd_model_full", "full_", sim, fb)
        lines.append("const SaModel *const MBSD_MODEL_FULL = &mbsd_model_full;")
    return "\n".join(lines) + "\n"
