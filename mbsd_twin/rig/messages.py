"""Message-level faults of the synthetic rig (:mod:`.synthetic`): a plan of dropped, duplicated, reordered,
late and invalid messages (random, and the ``dropout`` rig faults), the send order it gives, and the
counters the twin should report."""

from __future__ import annotations

import json
import math
import random
from typing import TYPE_CHECKING, Any

from ..twin.protocol import encode

if TYPE_CHECKING:
    from .synthetic import MessageSource, RigConfig

FAULT_KINDS = ("drop", "duplicate", "reorder", "late", "json", "types", "nan", "missing", "oversize", "version")
INVALID_REASON = {"json": "json", "types": "schema", "nan": "non_finite", "missing": "schema",
                  "oversize": "oversize", "version": "version"}


def _invalid(kind: str, msg: dict[str, Any]) -> bytes:
    m = json.loads(json.dumps(msg))
    if kind == "json":
        return encode(m).encode()[:-7]
    if kind == "types":
        m["ch"]["theta"][0] = "0.1"
    elif kind == "nan":
        m["ch"]["omega"][1] = math.nan
        return json.dumps(m).encode()  # allow_nan: the literal NaN
    elif kind == "missing":
        del m["t0"]
    elif kind == "oversize":
        m["pad"] = "x" * (1 << 20)
    elif kind == "version":
        m["v"] = 99
    return encode(m).encode()


def plan_faults(n_messages: int, rate: float, window: int, seed: int) -> dict[int, str]:
    """Message index → fault kind, spaced so that faults never interact (>= window + 6 apart)."""
    rng = random.Random(seed)
    gap = window + 6
    out: dict[int, str] = {}
    i = gap
    while i < n_messages - gap:
        if rng.random() < rate * gap:
            out[i] = FAULT_KINDS[len(out) % len(FAULT_KINDS)] if len(out) < len(FAULT_KINDS) \
                else rng.choice(FAULT_KINDS)
            i += gap
        else:
            i += 1
    return out


def message_plan(cfg: RigConfig, n_messages: int, rate: float, window: int) -> dict[int, str]:
    """The random message faults at ``rate`` per message (:func:`plan_faults`) and every message whose
    first sample falls in a ``dropout`` fault's window, dropped (the dropout wins)."""
    plan = plan_faults(n_messages, rate, window, cfg.seed) if rate > 0 else {}
    for f in cfg.faults:
        if f.kind == "dropout":
            first, end = f.sample(cfg.rate), math.ceil((f.onset + f.width) * cfg.rate - 1e-6)
            plan |= {i: "drop" for i in range(n_messages) if first <= i * cfg.batch < end}
    return dict(sorted(plan.items()))


def expected_counts(plan: dict[int, str]) -> dict[str, Any]:
    kinds = list(plan.values())
    invalid: dict[str, int] = {}
    for k in kinds:
        if k in INVALID_REASON:
            invalid[INVALID_REASON[k]] = invalid.get(INVALID_REASON[k], 0) + 1
    return {"gap": kinds.count("drop") + kinds.count("late"), "late": kinds.count("late"),
            "duplicate": kinds.count("duplicate"), "reordered": kinds.count("reorder"), "invalid": invalid}


def schedule(n_messages: int, plan: dict[int, str], window: int) -> list[tuple[int, str]]:
    """The send order: (message index, how) with how in ok / dup / a fault kind for invalid extras."""
    order: list[tuple[int, str]] = []
    late: dict[int, int] = {}  # position to insert at → index
    skip: set[int] = set()
    for i in range(n_messages):
        if i in skip:
            continue
        kind = plan.get(i)
        if kind == "drop":
            pass
        elif kind == "duplicate":
            order += [(i, "ok"), (i, "dup")]
        elif kind == "reorder":
            order += [(i + 1, "ok"), (i, "ok")]
            skip.add(i + 1)
        elif kind == "late":
            late[i + window + 3] = i
        elif kind in INVALID_REASON:
            order += [(i, kind), (i, "ok")]
        else:
            order.append((i, "ok"))
        if i in late:
            order.append((late.pop(i), "ok"))
    return order


def payload(src: MessageSource, i: int, how: str, cache: dict[int, dict[str, Any]]) -> bytes:
    if i not in cache:
        cache.clear() if len(cache) > 64 else None
        cache[i] = src.message(i)
    msg = cache[i]
    return encode(msg).encode() if how in ("ok", "dup") else _invalid(how, msg)
