"""``mbsd-twin plot`` and ``mbsd-twin animate`` (registered by mbsd_twin.cli; matplotlib is imported
by the handlers only)."""

from __future__ import annotations

import argparse
import sys


def _names(text: str | None) -> list[str]:
    return [c.strip() for c in (text or "").split(",") if c.strip()]


def _cmd_plot(args: argparse.Namespace) -> int:
    from ..twin.config.sections import ConfigError
    from .plotting import plot_csv
    from .units import column_units

    try:
        units = column_units(args.units) if args.units else None
        path = plot_csv(args.csv, args.output, _names(args.columns) or None, args.x, args.title,
                        (args.t_start, args.t_end), units)
    except (KeyError, ImportError, ValueError, ConfigError) as exc:
        print(f"mbsd-twin plot: error: {exc.args[0] if isinstance(exc, KeyError) else exc}", file=sys.stderr)
        return 2
    print(f"written: {path}")
    return 0


def add_plot(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plot", help="plot columns of a result CSV, fmpy's CSV or a history export (PNG, SVG, PDF)")
    p.add_argument("csv", help="CSV: a result (simulate, kinematics, inverse), the twin's rows (the demo's "
                               "twin.csv), fmpy's result, an FMU validation's fmu.csv/native.csv, or a "
                               "'twin history' export (pivoted: one line per channel)")
    p.add_argument("-o", "--output", required=True, help="figure file; the format follows the suffix")
    p.add_argument("--columns", help="comma-separated column names or glob patterns, e.g. 'crank.theta,*.fx' "
                                     "(default: every *.theta, *.fx, *.fy, *.mz, *.effort; a history export: "
                                     "every channel); one panel per unit")
    p.add_argument("--x", default=None, help="column on the x axis (default: time, else t); Unix times are "
                                             "drawn as seconds since the first")
    p.add_argument("--t-start", type=float, default=None, help="first x value shown (in the file's x values)")
    p.add_argument("--t-end", type=float, default=None, help="last x value shown")
    p.add_argument("--title", default=None, help="figure title (default: the CSV file name)")
    p.add_argument("--units", default=None, metavar="FILE",
                   help="where units come from for a CSV without them (fmpy's, a history export): the FMU, "
                        "the mechanism TOML or the twin configuration TOML")
    p.set_defaults(func=_cmd_plot)


def _cmd_animate(args: argparse.Namespace) -> int:
    from ..model.loader import load_mechanism
    from .animate import AnimationError, AnimationOptions, animate
    from .plotting import read_csv

    opts = AnimationOptions(fps=args.fps, t_start=args.t_start, t_end=args.t_end, speed=args.speed,
                            traces=tuple(args.trace), forces=tuple(_names(args.forces)), max_frames=args.max_frames,
                            dpi=args.dpi)
    try:
        path = animate(load_mechanism(args.mechanism), read_csv(args.csv), args.output, opts)
    except (AnimationError, ImportError) as exc:
        print(f"mbsd-twin animate: error: {exc}", file=sys.stderr)
        return 2
    print(f"written: {path}")
    return 0


def add_animate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("animate", help="animate a mechanism through a result CSV (GIF, or MP4 with ffmpeg)")
    p.add_argument("mechanism", help="mechanism TOML file")
    p.add_argument("csv", help="result CSV with every body's x, y, theta (simulate, kinematics, inverse)")
    p.add_argument("-o", "--output", required=True, help="anim.gif (Pillow) or anim.mp4 (ffmpeg)")
    p.add_argument("--fps", type=float, default=25.0, help="frames per second (default 25)")
    p.add_argument("--speed", type=float, default=1.0, help="simulated seconds per animation second (default 1)")
    p.add_argument("--t-start", type=float, default=None, help="first time shown [s] (default: the first row)")
    p.add_argument("--t-end", type=float, default=None, help="last time shown [s] (default: the last row)")
    p.add_argument("--trace", action="append", default=[], metavar="BODY[:X,Y]",
                   help="draw the path of a point (body frame, m; default the reference point); repeatable")
    p.add_argument("--forces", default=None, metavar="JOINTS",
                   help="comma-separated joints whose reaction (on the second body) is drawn as an arrow")
    p.add_argument("--max-frames", type=int, default=2000, help="refuse longer animations (default 2000)")
    p.add_argument("--dpi", type=int, default=90, help="resolution (default 90: 576x432 pixels)")
    p.set_defaults(func=_cmd_animate)
