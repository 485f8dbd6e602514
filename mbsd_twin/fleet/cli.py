"""``mbsd-twin fleet serve FLEET.toml [--ray ADDRESS]`` and ``mbsd-twin fleet acl FLEET.toml [--passwords]``
(registered by mbsd_twin.cli; docs/fleet.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading


def _cmd_fleet_serve(args: argparse.Namespace) -> int:
    from .config import FleetError
    from .supervisor import Fleet, LocalBackend

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.ray:
        from .ray_backend import RayBackend

        backend: object = RayBackend(args.ray)
    else:
        backend = LocalBackend()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # after ray.init, which installs its own (a hard exit)
        signal.signal(sig, lambda *_: stop.set())
    try:
        fleet = Fleet(args.fleet, backend)  # type: ignore[arg-type]
    except FleetError as exc:
        print(f"mbsd-twin fleet: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("mbsd_twin.fleet").info("fleet %s: %d asset(s) (%s)", args.fleet, len(fleet.cfg.assets),
                                              f"Ray at {args.ray}" if args.ray else "local processes")
    fleet.run(stop)
    return 0


def _cmd_fleet_acl(args: argparse.Namespace) -> int:
    """Print the fleet's mosquitto ACL lines, or (``--passwords``) its password-file lines."""
    import os

    from .acl import acl_text, password_lines
    from .config import FleetError, load_fleet

    try:
        fleet = load_fleet(args.fleet)
        if not args.passwords:
            sys.stdout.write(acl_text(fleet))
            return 0
        secret = os.environ.get(fleet.settings.password_env, "")
        if not secret:
            raise ValueError(f"the environment variable {fleet.settings.password_env} ([fleet] password_env) is "
                             "not set: the passwords are derived from the secret in it")
        sys.stdout.write(password_lines(fleet, secret))
    except (FleetError, ValueError) as exc:
        print(f"mbsd-twin fleet acl: {exc}", file=sys.stderr)
        return 2
    return 0


def add_fleet(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fleet", help="run one twin per asset of a fleet file (docs/fleet.md)")
    fsub = p.add_subparsers(dest="fleet_command", required=True)
    s = fsub.add_parser("serve", help="run the fleet; edits of the file add/remove twins (SIGTERM: stop all)")
    s.add_argument("fleet", help="fleet TOML file ([fleet] settings, one [[asset]] per twin)")
    s.add_argument("--ray", metavar="ADDRESS", help="run each twin as a Ray actor on this cluster (or 'auto')")
    s.set_defaults(func=_cmd_fleet_serve)
    a = fsub.add_parser("acl", help="print the mosquitto ACL of the fleet's users (one twin login per asset)")
    a.add_argument("fleet", help="fleet TOML file")
    a.add_argument("--passwords", action="store_true",
                   help="print the password-file lines instead (hashed; from the secret in [fleet] password_env)")
    a.set_defaults(func=_cmd_fleet_acl)
