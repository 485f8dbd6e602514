"""Long fuzz run (issue #15): mutated mechanism files, hostile sensor messages and twin commands.

    PYTHONPATH=. python benchmarks/fuzz.py --files 10000 --messages 10000 [--seed 1] [--save DIR]

Mechanism files are the shipped ones (examples/mechanisms, the bundled slider crank) with random
mutations (tests/fuzz_cases.py): each is loaded, checked and simulated for 20 ms (at most 2,000
internal steps and 2 s per output interval). Counted: ok, located MechanismError, unlocated
MechanismError, other package errors (assembly, DOF, consistency), simulations stopped with a
message (solver failure, step or wall-clock budget), crashes (any other exception)
and hangs (over the per-case budget). Messages go through ``parse_sensor`` (rejected by reason, or
accepted and run through a TwinCore); one case in four is instead a hostile command on the same
core, which must always answer a reply dict; every 25 cases a valid batch must still produce
states (else a "lost twin"). Cases are seeded one by one (seed, index), so any case replays alone.
Exit status 1 if there was a crash, a hang, an unlocated error or a lost twin.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fuzz_cases import command_call, mutate_mechanism, run_mechanism, sensor_message, timed  # noqa: E402

from mbsd_twin import load_mechanism  # noqa: E402
from mbsd_twin.rig.synthetic import MessageSource, RigConfig, Trajectory  # noqa: E402
from mbsd_twin.twin.config.sections import CoreConfig  # noqa: E402
from mbsd_twin.twin.core import TwinCore  # noqa: E402
from mbsd_twin.twin.protocol import Invalid, SensorBatch, encode, parse_sensor  # noqa: E402

BAD = ("unlocated", "crash", "hang")
MAX_BYTES = 256 * 1024


def _rng(seed: int, kind: int, i: int) -> random.Random:
    return random.Random(f"{seed}/{kind}/{i}")


def fuzz_files(n: int, seed: int, budget: float, save: Path | None) -> Counter[str]:
    counts: Counter[str] = Counter()
    slowest = (0.0, -1)
    t0 = time.perf_counter()
    for i in range(n):
        name, text = mutate_mechanism(_rng(seed, 0, i))
        outcome, detail, dt = timed(run_mechanism, text, budget=budget)
        counts[outcome] += 1
        slowest = max(slowest, (dt, i))
        if outcome in BAD:
            print(f"  file case {i} ({name}): {outcome} after {dt:.2f} s: {detail}", flush=True)
            if save is not None:
                save.mkdir(parents=True, exist_ok=True)
                (save / f"file_{seed}_{i}.toml").write_text(text, encoding="utf-8", errors="replace")
        if (i + 1) % 1000 == 0:
            print(f"  {i + 1} files, {time.perf_counter() - t0:.0f} s: {dict(counts)}", flush=True)
    print(f"  slowest file case: {slowest[1]} ({slowest[0]:.2f} s)")
    return counts


def _valid(core: TwinCore, source: MessageSource, k: int) -> bool:
    batch = parse_sensor(encode(source.message(k)).encode(), "sc-01", MAX_BYTES)
    assert isinstance(batch, SensorBatch)
    return any(o.topic.endswith("/state") for o in core.step(batch))


def _message_case(core: TwinCore, source: MessageSource, rng: random.Random, k: int, counts: Counter[str]) -> str:
    """One hostile message or command; returns a problem text, or "" when it was handled."""
    if rng.random() < 0.25:
        name, args = command_call(rng)
        reply = core.command(name, args)
        ok = isinstance(reply, dict) and set(reply) == {"cmd", "ok", "detail"} and isinstance(reply["ok"], bool)
        counts["command_ok" if ok and reply["ok"] else "command_refused" if ok else "command_bad_reply"] += 1
        core.command("resume", {})  # a fuzzed pause would drop the liveness batches
        return "" if ok else f"command {name!r} {args!r}: reply {reply!r}"
    got = parse_sensor(sensor_message(rng, source.message(k)), "sc-01", MAX_BYTES)
    if isinstance(got, Invalid):
        counts[f"rejected.{got.reason}"] += 1
        return ""
    counts["accepted"] += 1
    core.step(got)
    return ""


def fuzz_messages(n: int, seed: int, budget: float) -> Counter[str]:
    mech = load_mechanism(ROOT / "examples" / "mechanisms" / "slider_crank.toml")
    source = MessageSource(Trajectory(mech, RigConfig()), 1000.0)
    core = TwinCore(CoreConfig(), mech)
    counts: Counter[str] = Counter()
    k = 0
    t0 = time.perf_counter()
    for i in range(n):
        rng = _rng(seed, 1, i)
        start = time.perf_counter()
        try:
            problem = _message_case(core, source, rng, k, counts)
        except Exception as exc:  # noqa: BLE001 - counted
            problem = f"{type(exc).__name__}: {exc}"
            counts["crash"] += 1
        k += 1
        if time.perf_counter() - start > budget:
            counts["hang"] += 1
            print(f"  message case {i}: over the {budget} s budget", flush=True)
        if problem:
            print(f"  message case {i}: {problem[:300]}", flush=True)
        if (i + 1) % 25 == 0:
            k += 1
            if not _valid(core, source, k):
                counts["lost_twin"] += 1
                print(f"  message case {i}: a valid batch after it produced no states", flush=True)
        if (i + 1) % 2000 == 0:
            print(f"  {i + 1} messages/commands, {time.perf_counter() - t0:.0f} s", flush=True)
    counts["total"] = n
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--file-budget", type=float, default=10.0, help="seconds per mechanism file case")
    ap.add_argument("--message-budget", type=float, default=2.0, help="seconds per message or command case")
    ap.add_argument("--save", type=Path, default=None, help="folder for the files that crashed, hung or were unlocated")
    args = ap.parse_args()
    t0 = time.perf_counter()
    files = fuzz_files(args.files, args.seed, args.file_budget, args.save) if args.files else Counter()
    msgs = fuzz_messages(args.messages, args.seed, args.message_budget) if args.messages else Counter()
    print(f"\nmechanism files: total {args.files}, ok {files['ok']}, simulation stopped with a message "
          f"{files['stopped']}, located MechanismError {files['located']}, "
          f"unlocated MechanismError {files['unlocated']}, other package errors {files['model']}, "
          f"crashes {files['crash']}, hangs {files['hang']}")
    rejected = {k.split(".", 1)[1]: v for k, v in sorted(msgs.items()) if k.startswith("rejected.")}
    print(f"messages/commands: total {msgs['total']}, accepted {msgs['accepted']}, "
          f"rejected {sum(rejected.values())} by reason {rejected}, commands ok {msgs['command_ok']}, "
          f"commands refused {msgs['command_refused']}, bad replies {msgs['command_bad_reply']}, "
          f"crashes {msgs['crash']}, hangs {msgs['hang']}, lost twins {msgs['lost_twin']}")
    print(f"wall time {time.perf_counter() - t0:.0f} s")
    bad = sum(files[k] for k in BAD) + sum(msgs[k] for k in ("crash", "hang", "lost_twin", "command_bad_reply"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
