"""`kvsched report`: HTML from run directories."""

from __future__ import annotations

from pathlib import Path


def cmd_report(args) -> int:
    from reports.html import write_report

    write_report([Path(d) for d in args.run_dirs], Path(args.out))
    print(f"report: {args.out}")
    return 0


def register(sub) -> None:
    rep = sub.add_parser("report", help="HTML report of one or more run directories")
    rep.add_argument("run_dirs", nargs="+")
    rep.add_argument("--out", required=True)
    rep.set_defaults(func=cmd_report)
