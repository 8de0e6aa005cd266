"""`kvsched report`, `compare`, `check` and `timeline`: read run directories, never simulate.

Exit status: 0 done (check: within tolerance), 1 check found a regression, 2 unusable input
(missing or malformed files, unknown arm), printed as one line by kvsched.cli.
"""

from __future__ import annotations

from pathlib import Path

from sim.config import ConfigError


def cmd_report(args) -> int:
    from reports.html import write_report

    window = None
    if args.gantt_start is not None or args.gantt_end is not None:
        if args.gantt_start is None or args.gantt_end is None or args.gantt_start >= args.gantt_end:
            raise ConfigError("--gantt-start/--gantt-end: give both, start before end")
        window = (args.gantt_start, args.gantt_end)
    write_report([Path(d) for d in args.run_dirs], Path(args.out), window)
    print(f"report: {args.out}")
    return 0


def cmd_compare(args) -> int:
    from reports.compare import run_compare

    return run_compare(args.a, args.b, args.out)


def cmd_check(args) -> int:
    from reports.check import run_check

    return run_check(args.run_dir, args.baseline, update=args.update)


def cmd_timeline(args) -> int:
    from reports.timeline import write_timeline
    from reports.timeline_data import choose_arm
    from sim.rundir import arm_dir_name

    arm, _ = choose_arm(Path(args.run_dir), args.arm)
    out = args.out or Path(args.run_dir) / f"timeline-{arm_dir_name(arm)}.json"
    path, tl, count = write_timeline(args.run_dir, out, arm, args.start, args.end)
    if tl.steps is None:
        print("note: no steps.csv for this arm; run with record_steps: true for the steps track")
    size_mb = path.stat().st_size / 1e6
    print(
        f"timeline: {path} ({count} events, arm {arm}, {tl.start_s:g}-{tl.end_s:g} s, {size_mb:.1f} MB)"
    )
    print("open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing")
    return 0


def register(sub) -> None:
    rep = sub.add_parser("report", help="HTML report of one or more run directories")
    rep.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    rep.add_argument("--out", required=True, help="HTML file to write")
    rep.add_argument("--gantt-start", type=float, help="Gantt view window start (simulated s)")
    rep.add_argument("--gantt-end", type=float, help="Gantt view window end (default: 5 s mid-run)")
    rep.set_defaults(func=cmd_report)

    cmp = sub.add_parser(
        "compare", help="two runs (RUN_DIR) or two arms (RUN_DIR:ARM) side by side"
    )
    cmp.add_argument("a", metavar="A", help="RUN_DIR or RUN_DIR:ARM")
    cmp.add_argument("b", metavar="B", help="RUN_DIR or RUN_DIR:ARM")
    cmp.add_argument("--out", help="also write an HTML page here")
    cmp.set_defaults(func=cmd_compare)

    chk = sub.add_parser(
        "check", help="regression gate: a run against a baseline file (exit 1 on regression)"
    )
    chk.add_argument("run_dir", metavar="RUN_DIR")
    chk.add_argument("--baseline", required=True, help="baseline JSON (e.g. baselines/seed.json)")
    chk.add_argument(
        "--update", action="store_true", help="rewrite the baseline from this run, on purpose"
    )
    chk.set_defaults(func=cmd_check)

    tl = sub.add_parser(
        "timeline", help="Chrome trace-event JSON of one arm (Perfetto, chrome://tracing)"
    )
    tl.add_argument("run_dir", metavar="RUN_DIR")
    tl.add_argument("--arm", help="arm to export (default: the run's first)")
    tl.add_argument("--out", help="JSON file to write (default RUN_DIR/timeline-ARM.json)")
    tl.add_argument("--start", type=float, help="window start, simulated s (default 0)")
    tl.add_argument("--end", type=float, help="window end, simulated s (default: the run's end)")
    tl.set_defaults(func=cmd_timeline)
