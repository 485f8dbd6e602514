"""The ``mbsd-twin`` command line. Each sub-command is a thin face over the public API."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence

import numpy as np

from . import __version__
from .cli_args import parse_assignments
from .errors import MbsdError, PlausibilityWarning
from .model.loader import load_mechanism
from .model.model import Mechanism
from .progress import Progress, add_progress_flags
from .solvers.analysis import check, inverse_dynamics
from .solvers.results import Result

Handler = Callable[[argparse.Namespace], int]


def _load(args: argparse.Namespace) -> Mechanism:
    """The mechanism file ``args.file``; its plausibility warnings printed on stderr, one a line."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PlausibilityWarning)
        mech = load_mechanism(args.file)
    for w in caught:
        if issubclass(w.category, PlausibilityWarning):
            print(f"mbsd-twin {args.command}: warning: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return mech


def _cmd_check(args: argparse.Namespace) -> int:
    mech = _load(args)
    rep = check(mech)
    print(rep.summary())
    if args.plot:
        from .viz.pose import plot_pose

        print(f"plot           {plot_pose(mech, rep.pose, args.plot)}")
    return 0


def _summary(res: Result, path: str) -> str:
    lines = [f"{res.kind}: {len(res)} points, t = {res.time[0]:g} .. {res.time[-1]:g} s -> {path}"]
    for name in res.columns:
        if name.endswith((".fx", ".fy", ".mz", ".effort")):
            col = res[name]
            lines.append(f"  {name:<28} [{res.units[name]:>4}]  min {col.min():12.5g}  max {col.max():12.5g}"
                         f"  rms {np.sqrt(np.mean(col**2)):12.5g}")
    lines += [f"  warning: {w}" for w in res.warnings]
    return "\n".join(lines)


def _cmd_inverse(args: argparse.Namespace) -> int:
    mech = _load(args)
    t = np.linspace(args.t_start, args.t_end, args.steps + 1)
    with Progress("inverse", args.progress) as progress:
        res = inverse_dynamics(mech, t, progress=progress)
    res.to_csv(args.output)
    if args.output != "-":
        print(_summary(res, args.output))
    return 0


def _run_parser(sub: argparse._SubParsersAction, name: str, help: str) -> argparse.ArgumentParser:
    """A sub-command over a mechanism file and a time span, writing a CSV."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help)
    p.add_argument("file", help="mechanism TOML file")
    p.add_argument("--t-end", type=float, required=True, help="end time [s]")
    p.add_argument("-o", "--output", required=True, help="CSV file to write, or - for stdout")
    add_progress_flags(p)
    return p


def _add_inverse(sub: argparse._SubParsersAction) -> None:
    p = _run_parser(sub, "inverse", "inverse dynamics of a driven (DOF 0) mechanism over time")
    p.add_argument("--t-start", type=float, default=0.0, help="start time [s] (default 0)")
    p.add_argument("--steps", type=int, default=1000, help="number of time steps (points = steps + 1)")
    p.set_defaults(func=_cmd_inverse)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from .simulation.simulate import simulate
    from .solvers.dynamics import SolverOptions

    mech = _load(args)
    sets = parse_assignments(args.set, "--set")
    opts = SolverOptions(method=args.method, rtol=args.rtol, drift=args.drift, error_norm=args.error_norm,
                         energy_error_control=args.energy_error_control, initial_velocity=args.initial_velocity,
                         max_steps=args.max_steps)
    with Progress("simulate", args.progress) as progress:
        res = simulate(mech, args.t_end, args.output_interval, inputs=sets, options=opts, progress=progress,
                       time_limit=args.time_limit)
    res.to_csv(args.output)
    if args.output != "-":
        print(_summary(res, args.output))
        final = {k: res[k][-1] for k in res.columns if k.startswith("energy.") or k.startswith("constraints.")}
        for k, v in final.items():
            print(f"  {k:<28} final {v:12.5g} [{res.units[k]}]")
    if res.status < 0:
        print(f"mbsd-twin simulate: {res.message}", file=sys.stderr)
        if "internal steps" in res.message:
            print(f"mbsd-twin simulate: the step budget is --max-steps {args.max_steps} per output interval",
                  file=sys.stderr)
        return 1
    return 0


def _add_simulate(sub: argparse._SubParsersAction) -> None:
    p = _run_parser(sub, "simulate", "forward dynamics with inputs held at given values")
    p.add_argument("--output-interval", type=float, default=0.01, help="output interval [s] (default 0.01)")
    p.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                   help="hold input port NAME at VALUE (SI units); repeatable")
    p.add_argument("--method", default="DOP853", help="DOP853 (default), RK45, RK23, Radau, BDF, LSODA")
    p.add_argument("--rtol", type=float, default=1e-8, help="relative tolerance (default 1e-8)")
    p.add_argument("--drift", default="projection", help="projection (default), baumgarte or none")
    p.add_argument("--error-norm", default="max", choices=["max", "rms"],
                   help="step-size error norm: max (default, every coordinate within rtol) or rms (scipy's)")
    p.add_argument("--energy-error-control", action="store_true",
                   help="keep the energy integrals in the step-size control: about 3x the steps, "
                        "energy.balance_error about 1e4x smaller (see docs/simulator.md)")
    p.add_argument("--initial-velocity", default="project", choices=["project", "check"],
                   help="initial velocities that violate the joints' or drivers' velocity constraints: "
                        "project (default: the nearest consistent ones, least change, reported) or check "
                        "(fail naming the joints)")
    p.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="stop with an error after this much wall-clock time (checked at every output point)")
    p.add_argument("--max-steps", type=int, default=200_000,
                   help="most internal solver steps per output interval before the run fails (default 200000)")
    p.set_defaults(func=_cmd_simulate)


def _add_twin(sub: argparse._SubParsersAction) -> None:
    """``twin serve|replay`` and ``rig`` (digital twin over MQTT; needs the ``twin`` extra)."""
    from .twin.cli import add_twin  # handlers import paho/prometheus lazily

    add_twin(sub)


def _add_fleet(sub: argparse._SubParsersAction) -> None:
    """``fleet serve`` (one twin per asset, local processes or Ray actors; docs/fleet.md)."""
    from .fleet.cli import add_fleet

    add_fleet(sub)


def _add_fmu(sub: argparse._SubParsersAction) -> None:
    """``fmu build|validate`` (FMI 2.0 co-simulation FMU; needs the ``fmu`` extra)."""
    from .fmi.cli import add_parsers  # handlers import pythonfmu/fmpy lazily

    add_parsers(sub)


def _add_campaign(sub: argparse._SubParsersAction) -> None:
    """``campaign run`` (sweeps, FMU vs native, calibrations on a process pool or a Ray cluster)."""
    from .campaign.cli import add_parsers

    add_parsers(sub)


def _add_plot(sub: argparse._SubParsersAction) -> None:
    """``plot`` (a result CSV as a PNG/SVG/PDF figure; needs the ``plot`` extra)."""
    from .viz.cli import add_plot

    add_plot(sub)


def _add_animate(sub: argparse._SubParsersAction) -> None:
    """``animate`` (a mechanism moving through a result CSV, GIF or MP4; needs the ``plot`` extra)."""
    from .viz.cli import add_animate

    add_animate(sub)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    """``demo`` (broker, twin, rig, dashboard, FMU and report in one command; needs the ``demo`` extra)."""
    from .demo.cli import add_demo

    add_demo(sub)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mbsd-twin", description=__doc__)
    parser.add_argument("--version", action="version", version=f"mbsd-twin {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check", help="assemble a mechanism and report its pose, DOF and redundancy")
    p.add_argument("file", help="mechanism TOML file")
    p.add_argument("--plot", metavar="OUT.png", help="draw the assembled pose into this image")
    p.set_defaults(func=_cmd_check)
    _add_inverse(sub)
    _add_simulate(sub)
    _add_twin(sub)
    _add_fleet(sub)
    _add_fmu(sub)
    _add_campaign(sub)
    _add_plot(sub)
    _add_animate(sub)
    _add_demo(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except MbsdError as exc:
        print(f"mbsd-twin {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"mbsd-twin {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # a sub-command's own message (it names the command): a usage error, exit 2
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
