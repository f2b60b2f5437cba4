"""`rlvr report RUN_DIR`: write a self-contained HTML report of a run.

A results directory (`rlvr eval`, or a training run's eval/step_N/LABEL) gets a page with the
environment's own summary, the reward summary, plots and every rollout as a collapsible
conversation (an exact evaluation: every game that beat the policy, as a board). A training
run's folder (it holds metrics.csv) gets its curves and a table of its evaluations, each
linked to its own page (written too). The page (default RUN_DIR/report.html) needs no extra
packages and no network to view.
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
    p.add_argument(
        "run_dir", metavar="RUN_DIR", help="results directory (or its results.jsonl), or a training run's folder"
    )
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
