"""The plain entries of many parameters at once (:func:`.parameters.plain_entries` of each, issue
#33: one probe per parameter rebuilt the model twice per parameter, about an hour for the 5,002
probed parameters of a 1,000-link chain).

A group of parameters is probed in one rebuild, each set to its own probe value (distinct within
the group). The group's answer is taken when it tells every member's answer apart: the integer
buffer, options and inputs unchanged, every changed entry of ``fb`` holding exactly one member's
probe value where it held that member's value (its plain entries), no free length or angle taken
from the assembled pose among them (those say "the packed model changed" without saying whose
change it was), and, for a member without entries, the initial state unchanged (read by nobody:
``((), False)``). Otherwise the group is split in two and each half probed; a single parameter
is probed by :func:`.parameters.plain_entries` itself, so every answer is the one-by-one answer
(tests/test_fmu_standalone_params.py compares them on every shipped mechanism and a chain).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...errors import MbsdError
from ...simulation.ports import apply_parameters
from ...simulation.simulator import Simulator

Answer = tuple[tuple[int, ...], bool] | None
Single = Callable[[Simulator, str], Answer]


def _probe_values(sim: Simulator, names: Sequence[str], probe: float) -> tuple[dict[str, float], dict[str, float]]:
    values = {n: float(sim._table[n][0].value) for n in names}
    step = 0.5 / max(1, len(names))  # distinct relative changes, probe·[1, 1.5)
    return values, {n: v + probe * (1.0 + k * step) * max(1.0, abs(v)) for k, (n, v) in enumerate(values.items())}


def _group(sim: Simulator, names: Sequence[str], probe: float, reference: set[int]) -> dict[str, Answer] | None:
    """Every member's answer from one rebuild, or None when the rebuild cannot tell them apart."""
    values, probes = _probe_values(sim, names, probe)
    if len(set(probes.values())) < len(probes):
        return None
    try:
        ps = Simulator(apply_parameters(sim._base, probes), sim.options)._stepper
    except MbsdError:
        return None
    st = sim._stepper
    if (ps._fb.shape != st._fb.shape or not np.array_equal(ps._ib, st._ib) or not np.array_equal(ps._ob, st._ob)
            or not np.array_equal(ps._u, st._u)):
        return None
    changed = np.nonzero(ps._fb != st._fb)[0].tolist()
    if reference.intersection(changed):
        return None
    whose = {p: n for n, p in probes.items()}
    entries: dict[str, list[int]] = {}
    for e in changed:
        n = whose.get(float(ps._fb[e]))
        if n is None or st._fb[e] != values[n]:
            return None
        entries.setdefault(n, []).append(int(e))
    if len(entries) < len(names) and not np.array_equal(ps._S, st._S):
        return None
    return {n: (tuple(sorted(entries[n])), True) if n in entries else ((), False) for n in names}


def plain_entries_of(sim: Simulator, names: Sequence[str], single: Single, probe: float,
                     reference: set[int]) -> dict[str, Answer]:
    """``single(sim, name)`` of every name, by groups where a group's rebuild tells them apart."""
    out: dict[str, Answer] = {}
    todo = [list(names)] if names else []
    while todo:
        group = todo.pop()
        if len(group) == 1:
            out[group[0]] = single(sim, group[0])
            continue
        found = _group(sim, group, probe, reference)
        if found is not None:
            out.update(found)
        else:
            half = len(group) // 2
            todo += [group[half:], group[:half]]
    return out
