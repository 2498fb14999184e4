"""`rrg-review study analyze`: the analysis of a reader study from its long-format readings table
(one row per reading; README, "Reader studies: analysis"), printed as a short summary and
written as JSON and HTML. The logic is in rrg_review.reader_study; this module only formats."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_actions(actions: Any) -> None:
    """Add this module's actions to the `study` command's sub-parsers."""
    p = actions.add_parser(
        "analyze", help="mixed-model analysis of a reader study from its readings table",
        description="Per-arm summaries and each arm's effect against the reference arm (linear "
                    "mixed model of log reading time with crossed reader and case effects; "
                    "marginal logistic model for 'accepted'), from a CSV or Parquet table with "
                    "one row per reading and at least the columns reader, case, arm, session, "
                    "seconds.")
    p.add_argument("--readings", required=True, type=Path, metavar="FILE",
                   help="long-format readings table (.csv, or .parquet)")
    p.add_argument("--reference", metavar="ARM", default=None,
                   help="the arm every other arm is compared with (default: unassisted)")
    p.add_argument("--out", type=Path, metavar="result.json", help="write the JSON result here")
    p.add_argument("--html", type=Path, metavar="report.html", help="write the HTML report here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.reader_study.analysis import AnalysisError, analyze
    from rrg_review.reader_study.readings import ReadingsError, load
    from rrg_review.reader_study.report import write_html, write_json

    for target in (args.out, args.html):
        if target is not None and not target.parent.is_dir():
            print(f"error: {target}: the folder {target.parent} does not exist", file=sys.stderr)
            return 2
    try:
        result = analyze(load(args.readings), args.reference)
    except (ReadingsError, AnalysisError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in summary_lines(result):
        print(line)
    try:
        written = [write(result, path) for write, path in ((write_json, args.out),
                                                          (write_html, args.html)) if path]
    except OSError as exc:
        print(f"error: cannot write {exc.filename or 'the result'}: {exc.strerror or exc}",
              file=sys.stderr)
        return 2
    for path in written:
        print(path)
    return 0


def summary_lines(result: Any) -> list[str]:
    """The analysis in a few lines: counts, exclusions, and each contrast of each outcome."""
    n = result.n
    lines = [f"{result.source}: {n['readings']} readings, {n['readers']} readers, "
             f"{n['cases']} cases, {n['sessions']} sessions; reference arm {result.reference}"]
    lines += [f"excluded {e.count}: {e.reason}" for e in result.excluded]
    for name, outcome in result.outcomes.items():
        for c in outcome.contrasts:
            lines.append(f"{name}: {c.arm} vs {c.reference}: {c.scale.replace('_', ' ')} "
                         f"{c.estimate:.3f} (95 % CI {c.ci95[0]:.3f} to {c.ci95[1]:.3f}), "
                         f"p {c.p:.3g}")
        lines += [f"{name}: {note}" for note in outcome.notes]
    return lines
