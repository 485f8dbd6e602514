"""One mechanism's data for the standalone FMU's library: the compiled Simulator's arrays right
after construction (integrator state, inputs, packed model, scratch, options, output rows, energy
baseline) and the FMU's value references, as a C source (``model_data.c``) defining the
``SaModel`` of ``c/sa_engine.h``. Numbers are written as C99 hexadecimal floating constants: the
library starts from exactly the Simulator's bits."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import MbsdError
from ...model.model import Mechanism
from ...simulation.simulator import Simulator
from .parameters import applied


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


def _parameter_arrays(sim: Simulator, pars: Sequence[Any]) -> list[str]:
    """The C arrays of how each parameter is applied (``parameters.applied``) and of the initial
    state's assembly: the mechanism's guess, its pinned coordinates, the start values' places."""
    how = applied(sim, [v.name for v in pars])
    n = sim.system.n_coord
    held = list(sim._starts.index.values())
    offsets = np.cumsum([0] + [len(how[v.name].entries) for v in pars])
    ints = {"par_kind": [how[v.name].kind for v in pars], "par_strict": [int(how[v.name].strict) for v in pars],
            "par_asm": [int(how[v.name].assemble) for v in pars]}
    i64s = {"par_index": [how[v.name].index for v in pars], "par_off": offsets,
            "par_idx": [k for v in pars for k in how[v.name].entries], "pinned": sim.system.pinned,
            "hold_q": [k for k in held if k < n], "hold_v": [k - n for k in held if k >= n]}
    lines = [f"static const int {k}[] = {{{', '.join(map(str, v)) or '0'}}};" for k, v in ints.items()]
    lines += [f"static const i64 {k}[] = {{{_c_ints(v)}}};" for k, v in i64s.items()]
    lines += [f"static const double par_min[] = {{{_c_floats([how[v.name].minimum for v in pars])}}};",
              f"static const double q_guess[] = {{{_c_floats(sim.system.q0)}}};",
              f"static const double v_guess[] = {{{_c_floats(sim.system.v0)}}};"]
    return lines


def c_source(sim: Simulator, table: Sequence[Any], vrs: dict[str, tuple[int, str]]) -> str:
    """The ``model_data.c`` of the FMU whose variables are ``table`` (``variables.fmu_variables``)
    and value references ``vrs``."""
    st = sim._stepper
    names = sim.output_names()
    ins = [v for v in table if v.causality == "input"]
    outs = [v for v in table if v.causality == "output"]
    pars = [v for v in table if v.causality == "parameter"]
    ny = (len(st._S) - 8) // 11
    time_vr = next((vr for name, (vr, causality) in vrs.items() if causality == "independent"), -1)
    arrays = {"S0": _c_floats(st._S), "u0": _c_floats(st._u), "fb": _c_floats(st._fb), "wb0": _c_floats(st._wb),
              "ob": _c_floats(st._ob), "in_start": _c_floats([v.start or 0.0 for v in ins]),
              "par_start": _c_floats([v.start or 0.0 for v in pars])}
    ints = {"ib": _c_ints(st._ib), "ri": _c_ints(sim._react_idx), "er": _c_ints(sim._effort_rows),
            "in_slot": _c_ints([st.names.index(v.name) for v in ins]),
            "out_pick": _c_ints([names.index(v.name) for v in outs])}
    vr = {"in_vr": [vrs[v.name][0] for v in ins], "out_vr": [vrs[v.name][0] for v in outs],
          "par_vr": [vrs[v.name][0] for v in pars]}
    lines = ['#include "sa_engine.h"', ""]
    lines += [f"static const double {k}[] = {{{v}}};" for k, v in arrays.items()]
    lines += [f"static const i64 {k}[] = {{{v}}};" for k, v in ints.items()]
    lines += [f"static const uint32_t {k}[] = {{{', '.join(f'{x}u' for x in v) or '0'}}};" for k, v in vr.items()]
    lines += _parameter_arrays(sim, pars)
    lines.append(f"static const char *const par_name[] = {{{', '.join(_c_str(v.name) for v in pars) or '0'}}};")
    sizes = (len(st._S), len(st._u), len(st._ib), len(st._fb), len(st._wb), len(st._ob), len(sim._react_idx),
             len(sim._effort_rows), len(names), ny)
    held = list(sim._starts.index.values())
    n = sim.system.n_coord
    counts = (sim.system.n_coord, len(sim.system.pinned), sum(k < n for k in held), sum(k >= n for k in held))
    lines.append("const SaModel MBSD_MODEL = {" + ", ".join(map(str, sizes)) + ",")
    lines.append("    S0, u0, fb, wb0, ob, ib, ri, er, " + float(sim._e0).hex() + ",")
    lines.append(f"    {len(ins)}u, {len(outs)}u, {len(pars)}u, in_vr, out_vr, par_vr, in_slot, out_pick, in_start, "
                 f"par_start, par_kind, par_name, {time_vr}LL, par_index, par_min, par_strict, "
                 f"{names.index('energy.total')}LL,")
    lines.append("    par_off, par_idx, par_asm, " + ", ".join(f"{c}LL" for c in counts)
                 + f", q_guess, v_guess, pinned, hold_q, hold_v, {int(len(sim.system.drivers) > 0)}}};")
    return "\n".join(lines) + "\n"
