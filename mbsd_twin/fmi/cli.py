"""``mbsd-twin fmu build`` and ``mbsd-twin fmu validate``.

Only argparse is imported here; pythonfmu, fmpy and the engine are imported by the handlers.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

from ..cli_args import parse_assignments
from ..errors import FmuWarning

PROFILE_HELP = ("input profile: a number (constant), step:T:V0:V1, pwc:V0:T1:V1:T2:V2..., ramp:T0:T1:V0:V1 "
                "or sine:A:F[:OFFSET[:PHASE]] (SI units, seconds, Hz, rad); repeatable")


def cmd_build(args: argparse.Namespace) -> int:
    extra: dict[str, object] = {} if args.step_time_limit is None else {"step_time_limit": args.step_time_limit}
    if args.python and not args.host_independent:
        raise SystemExit("mbsd-twin fmu build: --python needs --host-independent")
    if args.standalone or args.source:
        return _build_standalone(args)
    if args.fmi_version == "3":
        from .fmi3 import build_fmu3 as build_fmu
    else:
        from .build import build_fmu
    if args.host_independent:
        extra.update(host_independent=True, python=args.python)
    outputs = [p.strip() for p in args.outputs.split(",") if p.strip()] if args.outputs else None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FmuWarning)
        path = build_fmu(args.mechanism, args.output, outputs=outputs, model_name=args.model_name,
                         stop_time=args.stop_time, step_size=args.step, **extra)  # type: ignore[arg-type]
    print(f"FMU written: {path}")
    for w in caught:
        if issubclass(w.category, FmuWarning):
            print(f"  warning: {w.message}")
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    note = _start_note(args.mechanism)
    if note:
        print(f"  note: the FMU starts with its {note}")
    if args.check:
        from .validation import check_fmu

        problems = check_fmu(path)
        for p in problems:
            print(f"  problem: {p}")
        verdict = f"{len(problems)} problem(s)" if problems else "fmpy validate and fmutool -check passed"
        print(f"checks: {verdict}")
        return 1 if problems else 0
    return 0


def _build_standalone(args: argparse.Namespace) -> int:
    """``fmu build --standalone``: engine and mechanism in the FMU's library (no Python at run time)."""
    if args.host_independent or args.step_time_limit is not None:
        raise SystemExit("mbsd-twin fmu build: --standalone (and --source) take none of --host-independent, --python, "
                         "--step-time-limit")
    from .standalone import build_standalone
    from .standalone.model_data import StandaloneUnsupported

    outputs = [p.strip() for p in args.outputs.split(",") if p.strip()] if args.outputs else None
    try:
        path = build_standalone(args.mechanism, args.output, outputs=outputs, model_name=args.model_name,
                                stop_time=args.stop_time, step_size=args.step, fmi_version=args.fmi_version,
                                source=args.source)
    except StandaloneUnsupported as exc:
        raise SystemExit(f"mbsd-twin fmu build --standalone: {exc}") from exc
    print(f"FMU written: {path} (standalone{', with sources/' if args.source else ''})")
    if not args.check:
        return 0
    from .validation import check_fmu

    problems = check_fmu(path)
    for p in problems:
        print(f"  problem: {p}")
    print(f"checks: {f'{len(problems)} problem(s)' if problems else 'fmpy validate and fmutool -check passed'}")
    return 1 if problems else 0


def _start_note(mechanism: Path | None) -> str:
    """What the FMU's Simulator changed in the mechanism's initial velocities ("" if nothing)."""
    from ..model.loader import bundled_slider_crank, load_mechanism
    from ..simulation.simulator import Simulator

    return Simulator(load_mechanism(mechanism or bundled_slider_crank())).initial_velocity_report.summary()


def cmd_validate(args: argparse.Namespace) -> int:
    from .inputs import parse_assignment
    from .validation import validate

    inputs = dict(parse_assignment(i) for i in args.input)
    rep = validate(args.fmu, mechanism=args.mechanism, stop_time=args.stop_time, step=args.step, inputs=inputs,
                   parameters=parse_assignments(args.param, "--param"), rtol=args.rtol, atol=args.atol,
                   checks=not args.no_checks)
    print(rep.table())
    if args.csv:
        for path in rep.write_csv(args.csv):
            print(f"written: {path}")
    if args.plot and rep.fmu_result and rep.native_result:
        try:
            print(f"written: {rep.plot(args.plot)}")
        except ImportError:
            print("plot skipped: matplotlib is not installed (pip install 'mbsd-twin[plot]')")
    return 0 if rep.ok else 1


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``fmu build`` and ``fmu validate`` under the ``fmu`` sub-command."""
    fmu = sub.add_parser("fmu", help="build and validate FMI 2.0 / 3.0 co-simulation FMUs")
    cmds = fmu.add_subparsers(dest="fmu_command", required=True)
    b = cmds.add_parser("build", help="build a co-simulation FMU of a mechanism (FMI 2.0 with PythonFMU, "
                                          "3.0 with pythonfmu3)")
    b.add_argument("mechanism", nargs="?", type=Path, default=None,
                   help="mechanism TOML file (default: the bundled slider crank)")
    b.add_argument("-o", "--output", type=Path, default=Path("dist"),
                   help="FMU file, or folder (default dist/) where the FMU is <Model>.fmu (FMI 2.0) or "
                        "<Model>-fmi3.fmu (FMI 3.0)")
    b.add_argument("--outputs", default=None, metavar="PATTERNS",
                   help="comma-separated glob patterns of the outputs to expose, or 'all' "
                        "(default: every body's x, y, vx, vy, theta, omega, reactions, energy, residual)")
    b.add_argument("--model-name", default=None, help="model identifier (default: from the mechanism name)")
    b.add_argument("--stop-time", type=float, default=None, help="DefaultExperiment stop time [s] (default 5)")
    b.add_argument("--step", type=float, default=None, help="DefaultExperiment step [s] (default 0.001)")
    b.add_argument("--fmi-version", choices=("2", "3"), default="2",
                   help="FMI version: 2 (PythonFMU, default) or 3 (pythonfmu3)")
    b.add_argument("--step-time-limit", type=float, default=None, metavar="S",
                   help="wall-clock seconds one doStep may take before it returns Discard (default 10: "
                        "mbsd_twin.fmi.slave_logic.STEP_TIME_LIMIT)")
    b.add_argument("--host-independent", action="store_true",
                   help="an FMU (FMI 2.0 or, with --fmi-version 3, 3.0) whose native library (compiled with gcc) runs "
                        "the model in a Python worker process: loadable by hosts without Python (C/C++ FMI tools); "
                        "see fmu/README.md")
    b.add_argument("--python", default=None, metavar="PATH",
                   help="with --host-independent: the interpreter the FMU starts its worker with (default: the "
                        "one running this build; MBSD_TWIN_FMU_PYTHON overrides it at run time)")
    b.add_argument("--standalone", action="store_true",
                   help="an FMU (FMI 2.0 or, with --fmi-version 3, 3.0) whose library holds the compiled engine and "
                        "the mechanism: no Python, no worker process, libc and libm only (built for this CPU); "
                        "see fmu/README.md")
    b.add_argument("--source", action="store_true",
                   help="the standalone FMU with its sources/ too (implies --standalone): C99 files, the engine as "
                        "x86-64 and AArch64 Linux assembly wrapped in C, from which a target's C compiler builds "
                        "the library; see fmu/README.md")
    b.add_argument("--check", action="store_true", help="run fmpy validate and fmutool -check afterwards")
    b.set_defaults(func=cmd_build)
    v = cmds.add_parser("validate", help="check an FMU and compare it with the native Simulator")
    v.add_argument("fmu", type=Path, help="FMU file")
    v.add_argument("--mechanism", type=Path, default=None, help="mechanism file (default: the one in the FMU)")
    v.add_argument("--stop-time", type=float, default=None, help="stop time [s] (default: DefaultExperiment)")
    v.add_argument("--step", type=float, default=None, help="communication step [s] (default: DefaultExperiment)")
    v.add_argument("--input", action="append", default=[], metavar="NAME=PROFILE", help=PROFILE_HELP)
    v.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="parameter value for both runs; repeatable")
    v.add_argument("--rtol", type=float, default=1e-9, help="relative band (default 1e-9 of max |native|)")
    v.add_argument("--atol", type=float, default=1e-12, help="absolute band in the output's unit (default 1e-12)")
    v.add_argument("--no-checks", action="store_true", help="skip fmpy validate and fmutool -check")
    v.add_argument("--csv", type=Path, default=None, metavar="DIR", help="write fmu.csv, native.csv, errors.csv")
    v.add_argument("--plot", type=Path, default=None, metavar="PNG", help="plot FMU vs native (needs matplotlib)")
    v.set_defaults(func=cmd_validate)
