"""``mbsd-twin twin serve|replay|history|calibrate|identify`` and ``mbsd-twin rig`` (registered by mbsd_twin.cli)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import os
import signal
from typing import TYPE_CHECKING, Any

from ..progress import Progress, add_progress_flags

if TYPE_CHECKING:
    from ..rig.file import RigFile
    from ..rig.synthetic import RigConfig


def _cmd_serve(args: argparse.Namespace) -> int:
    from .config.file import load_config
    from .redaction import redact
    from .service import TwinService
    from .worker_guard import EXIT_WORKER_DIED

    over: dict[str, dict[str, Any]] = {"broker": {"url": args.broker}, "core": {"asset": args.asset},
                                       "service": {"mechanism": args.mechanism},
                                       "record": {"path": args.record}, "metrics": {"port": args.metrics_port}}
    cfg = load_config(args.config or os.environ.get("MBSD_TWIN_CONFIG") or None, overrides=over)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from .watchdog import arm

    watcher = arm(cfg.service.stop_grace)  # SIGTERM works even with the worker stuck holding the GIL

    async def run() -> str:
        from .heap import freeze_startup
        from .starting import StartingStatus, compile_reason, kernels_to_compile

        need = kernels_to_compile()  # a first start after an install: 'starting' with the reason meanwhile
        with StartingStatus(cfg, compile_reason(need)) if need else contextlib.nullcontext():
            svc = TwinService(cfg)
        for sig in (signal.SIGTERM, signal.SIGINT):  # before connecting: a signal during start-up stops cleanly;
            signal.signal(sig, lambda *_: svc.stopping.set())  # Python handlers: the watchdog keeps the wakeup fd
        async with svc:
            freeze_startup()  # a stop on a busy machine without seconds of collecting the start-up's heap
            logging.getLogger("mbsd_twin.twin").info("serving %s on %s (config %s)", cfg.core.base,
                                                     redact(cfg.broker.url), cfg.config_hash())
            await svc.wait()
        return svc.worker_died

    died = asyncio.run(run())
    if watcher is not None:
        watcher.terminate()  # (it would also see the pipe close at exit)
    return EXIT_WORKER_DIED if died else 0  # a dead worker: non-zero, so that systemd or Docker restarts it


def _cmd_replay(args: argparse.Namespace) -> int:
    from .recorder import replay

    res = replay(args.recording)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            for topic, text in res.outputs:
                fh.write(json.dumps({"t": topic, "p": text}) + "\n")
    print(f"replayed {len(res.outputs)} outputs; recorded {res.recorded}; mismatches {res.mismatches}"
          + (f" (first: {res.first_mismatch})" if res.first_mismatch else "")
          + (f"; {res.gaps} gap(s): the recording was suspended by a write failure" if res.gaps else ""))
    return 0 if res.identical else 1


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from ..atomic import write_atomic
    from ..cli_args import parse_assignments
    from ..estimation.calibrate import format_report
    from ..estimation.mechfile import write_mechanism
    from .calibration import calibrate_recording, calibration_header

    with Progress("calibrate", args.progress) as progress:
        cal, rec = calibrate_recording(
            args.recording, args.param, channels=[c for c in (args.channels or "").split(",") if c],
            noise=parse_assignments(args.noise or [], "--noise"), start=parse_assignments(args.start or [], "--start"),
            t_start=args.t_start, t_end=args.t_end, segment=args.segment, stride=args.stride, hold=args.hold,
            progress=progress)
    t_end = min(args.t_end, float(rec.times[-1]))
    torn = f", {len(rec.torn)} unreadable lines skipped (first: {rec.torn[0]})" if rec.torn else ""
    gaps = f", {rec.gaps} recording gaps" if rec.gaps else ""
    print(f"{args.recording}: {len(rec.times)} samples in {rec.batches} batches ({rec.duplicates} duplicates "
          f"dropped{torn}{gaps}); fitted window {args.t_start} to {t_end:.3f} s")
    print(format_report(cal))
    if args.output:
        write_mechanism(args.output, rec.mechanism_text, rec.mechanism, cal.as_dict(),
                        calibration_header(cal, args.recording))
        print(f"wrote {args.output}")
    if args.json:
        report = {"recording": args.recording, "t_start": args.t_start, "t_end": t_end, **cal.to_json()}
        write_atomic(args.json, json.dumps(report, indent=1) + "\n")
    return 0 if cal.success else 1


def _cmd_identify(args: argparse.Namespace) -> int:
    from ..errors import MechanismError
    from ..model.loader import bundled_slider_crank, load_mechanism
    from ..rig.file import RigFileError, load_rig_file
    from .config.file import load_config
    from .config.sections import ConfigError
    from .identify import format_report, identify, report_json

    path = args.config or os.environ.get("MBSD_TWIN_CONFIG") or None
    where = f"mbsd-twin twin identify: {path or '<defaults>'}"
    try:
        cfg = load_config(path)
        rig = load_rig_file(args.rig).config if args.rig else None
    except (ConfigError, RigFileError) as exc:
        raise SystemExit(f"mbsd-twin twin identify: {exc}") from None
    mech_path = cfg.service.mechanism or str(bundled_slider_crank())
    try:
        mech = load_mechanism(mech_path)
    except (OSError, MechanismError) as exc:
        raise SystemExit(f"{where}: [service] mechanism {mech_path!r}: {exc}") from None
    try:
        rep = identify(cfg.core, mech, rig, rig_name=args.rig or "",
                       **{k: v for k in ("duration", "segment") if (v := getattr(args, k)) is not None})
    except ValueError as exc:
        raise SystemExit(f"{where}{' with rig ' + args.rig if args.rig else ''}: {exc}") from None
    print(json.dumps(report_json(rep), indent=1) if args.json else format_report(rep))
    return 0


def _cmd_rig(args: argparse.Namespace) -> int:
    from ..model.loader import bundled_slider_crank, load_mechanism
    from ..rig.client import Rig, write_manifest

    rig_file, cfg = _rig_config(args)
    mech = load_mechanism(args.mechanism or rig_file.mechanism or bundled_slider_crank())
    try:
        rig = Rig(mech, cfg, args.broker, window=args.window, protocol=args.protocol)
    except ValueError as exc:  # a channel, parameter or fault target the mechanism lacks
        raise SystemExit(f"mbsd-twin rig: {exc}") from None
    duration = args.duration if args.duration is not None else rig_file.duration
    if args.precompute:
        with Progress("rig: precompute", args.progress) as progress:
            rig.precompute(duration, progress)
    with Progress(f"rig: streaming {duration:g} s", args.progress) as progress:
        manifest = rig.run(duration, args.faults, progress=progress)
    write_manifest(manifest, args.manifest)
    return 0


_RIG_FLAGS = ("asset", "prefix", "rate", "batch", "seed", "substeps", "drive", "drive_speed", "friction_joint",
              "torque", "torque_amp")


def _rig_config(args: argparse.Namespace) -> tuple[RigFile, RigConfig]:
    """The rig file (or the defaults) with the command-line options on top."""
    import dataclasses

    from ..rig.file import RigFile, RigFileError, load_rig_file, with_channels

    try:
        rig_file = load_rig_file(args.rig) if args.rig else RigFile()
    except RigFileError as exc:
        raise SystemExit(f"mbsd-twin rig: {exc}") from None
    over: dict[str, Any] = {k: getattr(args, k) for k in _RIG_FLAGS if getattr(args, k) is not None}
    over |= {k: "" for k in ("drive", "drive_speed", "friction_joint") if over.get(k) == "none"}
    cfg = dataclasses.replace(rig_file.config, **over, faults=rig_file.config.faults + tuple(args.fault))
    if args.channel:
        cfg = with_channels(cfg, dict(args.channel))
    if args.noise is not None:
        cfg = dataclasses.replace(cfg, noise={} if "none" in args.noise else cfg.noise | dict(args.noise))
    if args.mismatch is not None:
        cfg = dataclasses.replace(cfg, mismatch={} if "none" in args.mismatch else dict(args.mismatch))
    return rig_file, cfg


def _fault_arg(text: str) -> Any:
    from ..rig.faults import parse_fault

    try:
        return parse_fault(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _assignment(what: str, number: bool = True, non_negative: bool = False) -> Any:
    """An argparse type for NAME=NUMBER (NAME=TEXT unless ``number``; or ``none``), naming the bad spec."""
    def parse(text: str) -> Any:
        if text == "none":
            return "none"
        name, eq, value = text.partition("=")
        if not number and eq and name and value:
            return (name, value)
        try:
            v = float(value) if eq and name and number else math.nan
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v < 0 and non_negative:
            form = "NAME=NUMBER" + (" (>= 0)" if non_negative else "") if number else "NAME=OUTPUT"
            raise argparse.ArgumentTypeError(f"bad {what} spec {text!r}: expected {form} or none")
        return (name, v)
    return parse


RIG_EPILOG = """fault specs (--fault, repeatable; a fault takes effect at the first sample at or after its onset T [s
of rig time from the stream's start]):
  mass@T:PARAM*FACTOR      model parameter scaled, e.g. mass@2.0:piston.mass*1.2 (+20 %)
  mass@T:PARAM=VALUE       model parameter set, e.g. mass@2.0:piston.mass=1.8
  friction@T:JOINT=NM      added friction torque -NM*tanh(w/1e-3) in a revolute joint,
                           e.g. friction@3.0:main_bearing=0.3
  input_bias@T:PORT+X      X added to an input port of the rig's model (an unmeasured torque or force;
                           the port's channel still reads the command), e.g. input_bias@3.0:motor_torque+0.3
  load_pulses@T:BODY=N,W,P unmeasured force pulses of N newtons, W s long every P s along the body's slider axis,
                           e.g. load_pulses@5.0:piston=20,0.03,0.5
  encoder_offset@T:CH+X    X added to channel CH (a sensor bias), e.g. encoder_offset@4.0:theta+0.02
  drift@T:CH+R             R*(t - T) added to channel CH (R per s), e.g. drift@2.0:theta+0.001
  stuck@T:CH               channel frozen at its value at onset (noise still added), e.g. stuck@6.0:omega
  dropout@T:sensors=W      no sensor messages for W s, e.g. dropout@4.0:sensors=0.5
The manifest lists them under rig_faults with the sample and rig time they took effect. A rig file
(--rig, TOML) sets the same things; options given here override it (docs/connect-your-rig.md)."""


def _add_rig(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("rig", help="synthetic rig of any mechanism publishing sensor messages", epilog=RIG_EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--rig", metavar="FILE", help="rig file (TOML; docs/connect-your-rig.md); options override it")
    add_progress_flags(g)
    g.add_argument("--broker", default="mqtt://127.0.0.1:1883")
    g.add_argument("--asset", help="asset id (default sc-01)")
    g.add_argument("--prefix", help="topic prefix (default dt/v1)")
    g.add_argument("--mechanism", default=None,
                   help="mechanism TOML file (default: the rig file's, else the slider crank packaged with mbsd-twin)")
    g.add_argument("--channel", action="append", type=_assignment("channel", number=False), metavar="CH=OUTPUT",
                   help="publish model output OUTPUT (or the driven input port) as channel CH (repeatable; replaces "
                        "the default theta=crank.theta omega=crank.omega f_x=main_bearing.fx f_y=main_bearing.fy "
                        "tau_m=motor_torque)")
    g.add_argument("--drive", help="input port the rig's controller drives (default motor_torque), or none")
    g.add_argument("--drive-speed", help="output its speed controller follows (default crank.omega), or none for "
                                         "the open-loop torque --torque + --torque-amp*sin(2*pi*0.5 Hz*t)")
    g.add_argument("--friction-joint", help="joint whose viscous friction the controller feeds forward "
                                            "(default main_bearing), or none")
    g.add_argument("--torque", type=float, help="open loop: mean drive value (default 0)")
    g.add_argument("--torque-amp", type=float, help="open loop: drive amplitude (default 1)")
    g.add_argument("--rate", type=float, help="samples per second (default 1000)")
    g.add_argument("--batch", type=int, help="samples per message (default 20)")
    g.add_argument("--substeps", type=int,
                   help="integration sub-intervals per sample (default 4; >= 2 keeps the torque ramp's first moment; "
                        "2 costs about half of 4 at the same accuracy, e.g. at 10 kHz)")
    g.add_argument("--faults", type=float, default=0.0, help="message-level fault probability per message")
    g.add_argument("--fault", action="append", default=[], type=_fault_arg, metavar="SPEC",
                   help="inject a model or sensor fault at a known time (repeatable; specs below)")
    g.add_argument("--noise", action="append", type=_assignment("noise", non_negative=True), metavar="CH=STD",
                   help="sensor noise standard deviation of a channel (repeatable; others keep their defaults: "
                        "theta=1e-3 omega=0.01 tau_m=0.002 f_x=0.5 f_y=0.5), or none for a noise-free stream")
    g.add_argument("--mismatch", action="append", type=_assignment("mismatch"), metavar="PARAM=VALUE",
                   help="hidden model parameter of the rig (repeatable; replaces the default piston.mass=1.53), "
                        "or none for a rig identical to the model")
    g.add_argument("--seed", type=int)
    g.add_argument("--duration", type=float, help="seconds to stream (default: the rig file's, else 10)")
    g.add_argument("--window", type=int, default=5, help="the twin's reorder window (spaces faults)")
    g.add_argument("--protocol", type=int, choices=(4, 5), default=5, help="MQTT 5 or 4 (3.1.1, e.g. amqtt)")
    g.add_argument("--precompute", action="store_true", help="compute the whole trajectory before streaming")
    g.add_argument("--manifest", help="write the fault manifest here (default: stdout)")
    g.set_defaults(func=_cmd_rig)


def add_twin(sub: argparse._SubParsersAction) -> None:
    from ..estimation.holds import HOLDS

    p = sub.add_parser("twin", help="digital-twin service over MQTT")
    tsub = p.add_subparsers(dest="twin_command", required=True)
    s = tsub.add_parser("serve", help="run the twin service (SIGTERM: graceful stop)")
    s.add_argument("--config", help="twin TOML file (see docs/service-config.md; default $MBSD_TWIN_CONFIG)")
    s.add_argument("--broker", help="mqtt://host:port or mqtts://host:port")
    s.add_argument("--asset", help="asset id, e.g. sc-01")
    s.add_argument("--mechanism", help="mechanism TOML file (default: the config's, else the packaged slider crank)")
    s.add_argument("--record", help="record to this JSON-lines file")
    s.add_argument("--metrics-port", "--http-port", dest="metrics_port", type=int,
                   help="HTTP port for /metrics, /healthz, /readyz and the dashboard (/dashboard/)")
    s.set_defaults(func=_cmd_serve)
    r = tsub.add_parser("replay", help="re-run a recording without a broker and compare the outputs")
    r.add_argument("recording")
    r.add_argument("-o", "--output", help="write the replayed outputs as JSON lines")
    r.set_defaults(func=_cmd_replay)

    from ..storage.history.export import add_parser as add_history

    add_history(tsub)

    c = tsub.add_parser("calibrate", help="fit model parameters to a recording (least squares, multiple shooting)")
    c.add_argument("recording", help="a twin recording (JSON lines, see docs/calibration.md)")
    add_progress_flags(c)
    c.add_argument("--param", action="append", required=True, metavar="NAME",
                   help="a fixed model parameter to fit, e.g. piston.mass (repeat for more)")
    c.add_argument("--channels", help="compared channels to fit, comma-separated (default: all of the recording's)")
    c.add_argument("--noise", nargs="+", action="extend", metavar="CHANNEL=SIGMA",
                   help="measurement noise σ per channel (others: RMS residual of a first pass)")
    c.add_argument("--start", nargs="+", action="extend", metavar="NAME=VALUE",
                   help="starting value of a fitted parameter (default: the recorded mechanism's)")
    c.add_argument("--segment", type=float, default=0.5, help="shooting segment length [s]")
    c.add_argument("--stride", type=int, default=5, help="compare every STRIDE-th sample")
    c.add_argument("--hold", choices=HOLDS, default="foh", help="input hold between samples")
    c.add_argument("--t-start", type=float, default=0.0, help="window start [s from the first sample]")
    c.add_argument("--t-end", type=float, default=float("inf"), help="window end [s from the first sample]")
    c.add_argument("-o", "--output", help="write the calibrated mechanism file here")
    c.add_argument("--json", help="write the report (estimates, σ, correlation, figures) as JSON here")
    c.set_defaults(func=_cmd_calibrate)

    i = tsub.add_parser("identify", help="identifiability check: which unknowns the twin's sensors can tell apart "
                                         "over a healthy motion (Fisher information, docs/twin-estimation.md)")
    i.add_argument("--config", help="twin TOML file (default $MBSD_TWIN_CONFIG, else the defaults: the slider crank)")
    i.add_argument("--duration", type=float, help="seconds of healthy motion [s] (default 2)")
    i.add_argument("--segment", type=float,
                   help="each segment's initial state is a nuisance parameter [s] (default 0.1)")
    i.add_argument("--rig", metavar="FILE", help="rig file whose motion to use (default: the rig `mbsd-twin rig` "
                                                 "runs for the twin's channels: a speed controller)")
    i.add_argument("--json", action="store_true", help="print the report as JSON")
    i.set_defaults(func=_cmd_identify)

    _add_rig(sub)
