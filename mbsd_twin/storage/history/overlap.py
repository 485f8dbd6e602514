"""A sample time is stored once: the samples of a new block that fall within a stored block of the
same series (or within a block written earlier in the same batch) are dropped before the insert —
first write wins. Two instances of one asset's twin briefly process the same sensor batch during a
fencing hand-over (docs/fleet.md) and both write its outputs; the store keeps the first.

A sample falls within a block when the floor of its rig time in µs lies in the block's
``[t0_us, t1_us]`` (the same floor as the stored columns: a sample written twice has the same µs).
What remains of a block is written as one block per run of consecutive kept samples. Each run keeps
its samples' times bit for bit: a message cut at its end keeps its ``(t0, n)``; a message cut at its
start gets parts whose ``t0 + j·dt`` reproduce the message's own ``t0 + k·dt`` exactly (a new
``t0 + k·dt`` would differ by a float64 step at Unix rig times), one part per run of samples that
the first one's time reproduces. The aggregate columns are computed from each run's own values
when it is written (:func:`.buckets.block_aggregates`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from .rows import Block, samples

Span = tuple[int, int]  # t0_us, t1_us of a block (µs, floor; both ends inclusive)
Part = tuple[float, int]  # t0, n of one message of a block
Key = tuple[int, int, int]  # series id, t0_us, t1_us of a block


def us(t: float) -> int:
    """Rig time [s] as the store's µs columns hold it (floor)."""
    return math.floor(t * 1e6)


def span(b: Block) -> Span:
    return us(b.t0), us(b.t1)


def parts(b: Block) -> list[Part]:
    """(t0, n) of each message of a block."""
    if b.parts is None:
        return [(b.t0, b.n)]
    p = np.frombuffer(b.parts, dtype="<f8")
    return list(zip(p[0::2].tolist(), p[1::2].astype(np.int64).tolist(), strict=True))


def exact_parts(t: np.ndarray, dt: float) -> list[Part]:
    """Parts ``(t0, n)`` whose ``t0 + j·dt`` are the times ``t`` bit for bit (``t``: samples of one
    message at ``dt``): each part starts at a sample's own time and runs while that reproduces the next."""
    out: list[Part] = []
    i = 0
    while i < len(t):
        j, w = i + 1, 64
        while j < len(t):
            end = min(len(t), j + w)
            bad = np.flatnonzero(t[i] + np.arange(j - i, end - i) * dt != t[j:end])
            if len(bad):
                j += int(bad[0])
                break
            j, w = end, 2 * w
        out.append((float(t[i]), j - i))
        i = j
    return out


def _run(b: Block, ps: list[Part], t: np.ndarray, a: int, e: int) -> Block:
    """The samples ``[a, e)`` of block ``b`` (messages ``ps``, sample times ``t``) as one block."""
    out: list[Part] = []
    off = 0
    for t0, n in ps:
        lo, hi = max(a, off), min(e, off + n)
        if lo < hi:
            out += [(t0, hi - lo)] if lo == off else exact_parts(t[lo:hi], b.dt)
        off += n
    packed = None if len(out) == 1 else np.array(out, dtype="<f8").ravel().tobytes()
    return Block(b.asset, b.channel, out[0][0], b.dt, e - a, b.value[8 * a:8 * e],
                 None if b.sigma is None else b.sigma[8 * a:8 * e], packed)


def trim(b: Block, spans: Iterable[Span]) -> tuple[list[Block], int]:
    """Block ``b`` without its samples within ``spans``: (the runs of kept samples as blocks, the
    number of samples dropped)."""
    ps = parts(b)
    t = np.concatenate([samples(t0, b.dt, n) for t0, n in ps])
    t_us = np.floor(t * 1e6).astype(np.int64)
    drop = np.zeros(len(t), dtype=bool)
    for lo, hi in spans:
        drop |= (t_us >= lo) & (t_us <= hi)
    dropped = int(drop.sum())
    if not dropped:
        return [b], 0
    kept = np.flatnonzero(~drop)
    runs = np.split(kept, np.flatnonzero(np.diff(kept) != 1) + 1) if len(kept) else []
    return [_run(b, ps, t, int(r[0]), int(r[-1]) + 1) for r in runs], dropped


def keep_new(blocks: Sequence[Block], keys: Sequence[Key], stored: dict[int, list[Span]]
             ) -> tuple[list[Block], int]:
    """What of ``blocks`` (``keys``: each one's series and span, in batch order) is new: each block
    without the samples within the ``stored`` spans of its series or within a block before it in the
    batch; (the blocks to write, the number of samples dropped). A block after everything known of
    its series (the common case: a batch continues its series) costs one comparison."""
    out: list[Block] = []
    dropped = 0
    known: dict[int, list[Span]] = {sid: list(spans) for sid, spans in stored.items()}
    last = {sid: max(hi for _, hi in spans) for sid, spans in known.items() if spans}
    for b, (sid, lo, hi) in zip(blocks, keys, strict=True):
        spans = known.setdefault(sid, [])
        hit = [x for x in spans if x[0] <= hi and x[1] >= lo] if lo <= last.get(sid, lo - 1) else []
        kept, k = trim(b, hit) if hit else ([b], 0)
        out += kept
        dropped += k
        spans += [span(x) for x in kept] if hit else [(lo, hi)]
        if spans:
            last[sid] = max(last.get(sid, spans[-1][1]), spans[-1][1])
    return out, dropped
