"""``mbsd-twin demo`` (registered by mbsd_twin.cli; the handler imports the twin and FMU parts)."""

from __future__ import annotations

import argparse
from pathlib import Path


def _cmd_demo(args: argparse.Namespace) -> int:
    from ..rig.faults import parse_fault
    from .run import DemoOptions, run_demo

    if args.duration <= 0:
        raise ValueError("--duration must be positive")
    faults = None if args.inject is None else tuple(parse_fault(s) for s in args.inject if s != "none")
    opts = DemoOptions(duration=args.duration, out=Path(args.out), broker=args.broker, protocol=args.protocol,
                       http_host=args.http_host, http_port=args.http_port, fault_rate=args.faults, seed=args.seed,
                       fmu=not args.no_fmu, fmu_stop=args.fmu_stop, live=args.live, faults=faults)
    return run_demo(opts)


def add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="the whole product in one command: embedded MQTT broker, twin service with "
                                    "dashboard, synthetic rig, FMU build and validation, report folder")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of live streaming (default 30)")
    p.add_argument("-o", "--out", default="out/demo", help="report folder (default out/demo)")
    p.add_argument("--broker", default=None, metavar="URL",
                   help="use this broker (mqtt://host:port) instead of starting the embedded amqtt broker")
    p.add_argument("--protocol", type=int, choices=(4, 5), default=4,
                   help="MQTT protocol: 4 = 3.1.1 (default; amqtt speaks only this), 5 = MQTT 5")
    p.add_argument("--http-host", default="127.0.0.1", help="dashboard address (default 127.0.0.1)")
    p.add_argument("--http-port", type=int, default=0, help="dashboard port (default: a free port)")
    p.add_argument("--faults", type=float, default=0.01, help="fault probability per sensor message (default 0.01)")
    p.add_argument("--seed", type=int, default=0, help="seed of the rig's noise and fault plan")
    p.add_argument("--inject", action="append", metavar="SPEC",
                   help="a rig fault to inject (repeatable; e.g. friction@6:main_bearing=0.3, the forms of "
                        "`mbsd-twin rig --fault`; 'none': no fault). Default: the crank encoder slips by "
                        "0.05 rad at 60 %% of the run (encoder_offset@T:theta+0.05)")
    p.add_argument("--no-fmu", action="store_true", help="skip the FMU build and validation")
    p.add_argument("--fmu-stop", type=float, default=2.0, help="FMU validation run length [s] (default 2)")
    p.add_argument("--live", choices=("auto", "rich", "plain", "off"), default="auto",
                   help="terminal view: rich table on a terminal, plain lines otherwise (default auto)")
    p.set_defaults(func=_cmd_demo)
