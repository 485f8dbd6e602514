"""``mbsd-twin campaign run CAMPAIGN.toml [--ray ADDRESS|auto] [--workers N] --out DIR``."""

from __future__ import annotations

import argparse
from pathlib import Path


def cmd_run(args: argparse.Namespace) -> int:
    from .backends import make_backend
    from .config import load_campaign
    from .runner import run_campaign

    campaign = load_campaign(args.campaign)
    backend = make_backend(args.ray, args.workers)
    try:
        summary = run_campaign(campaign, backend, args.out)
    finally:
        backend.close()
    for j in summary["jobs"]:
        print(f"{j['name']:<32} {j['kind']:<14} {'pass' if j['ok'] else 'FAIL'} ({j['passed']}/{len(j['tasks'])})")
    print(f"{'PASS' if summary['ok'] else 'FAIL'}: {summary['wall']:.1f} s on {summary['backend']}; "
          f"written: {Path(args.out) / 'summary.json'}, {Path(args.out) / 'summary.md'}")
    return 0 if summary["ok"] else 1


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Register ``campaign run``."""
    p = sub.add_parser("campaign", help="scripted validation runs: sweeps, FMU vs native, calibrations")
    cmds = p.add_subparsers(dest="campaign_command", required=True)
    r = cmds.add_parser("run", help="run a campaign file's jobs in parallel and write one summary")
    r.add_argument("campaign", type=Path, help="campaign TOML file (docs/campaigns.md)")
    r.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="run the tasks on the Ray cluster at ADDRESS (host:port, or 'auto'); "
                        "default: a local process pool")
    r.add_argument("--workers", type=int, default=None,
                   help="processes of the local pool (default: the CPU count); with --ray, tasks in flight")
    r.add_argument("--out", type=Path, required=True, help="folder for summary.json and summary.md")
    r.set_defaults(func=cmd_run)
