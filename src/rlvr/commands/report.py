"""`rlvr report RUN_DIR`: write a self-contained HTML report of a run.

The report (default RUN_DIR/report.html) holds the run's metadata, its summary numbers, plots
(reward distribution, mean of each reward function, turns per rollout, stop reasons) and every
rollout as a collapsible conversation. It needs no extra packages and no network to view.
"""

from __future__ import annotations

import argparse
from typing import Any

from rlvr.errors import UsageError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "report",
        help="write an HTML report of a run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="results directory (or its results.jsonl)")
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="FILE",
        help="report file (default RUN_DIR/report.html)",
    )
    p.add_argument(
        "--max-rollouts",
        type=int,
        default=1000,
        metavar="N",
        help="rollouts to include in the browsable list (default 1000)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rlvr.report import write_report

    if args.max_rollouts < 0:
        raise UsageError(f"--max-rollouts must be >= 0, got {args.max_rollouts}")
    try:
        out = write_report(args.run_dir, args.output, max_rollouts=args.max_rollouts)
    except (IsADirectoryError, PermissionError, FileNotFoundError, NotADirectoryError) as exc:
        raise UsageError(f"cannot write the report: {exc.strerror}: {exc.filename}") from None
    print(f"wrote {out}")
    return 0
