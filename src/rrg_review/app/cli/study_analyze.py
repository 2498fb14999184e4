"""`rrg-review study analyze`: the analysis of a reader study from its long-format readings table
(one row per reading; README, "Reader studies: analysis"), printed as a short summary and
written as JSON and HTML. The table is a file (`--readings FILE`: a study run elsewhere) or
built from the database (`NAME`: a study run here, the arms unblinded since whoever holds the
database is its admin; audited as `study_unblind`), optionally written out with `--csv`. The
logic is in rrg_review.reader_study and app.reader_study.table; this module only formats."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rrg_review.app.cli.options import add_db


def add_actions(actions: Any) -> None:
    """Add this module's actions to the `study` command's sub-parsers."""
    p = actions.add_parser(
        "analyze", help="mixed-model analysis of a reader study from its readings table",
        description="Per-arm summaries and each arm's effect against the reference arm (linear "
                    "mixed model of log reading time with crossed reader and case effects; "
                    "marginal logistic model for 'accepted'), from a CSV or Parquet table with "
                    "one row per reading and at least the columns reader, case, arm, session, "
                    "seconds; or of a study in the database, by its name.")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="a reader study in the database (or give --readings FILE)")
    p.add_argument("--readings", type=Path, metavar="FILE",
                   help="long-format readings table (.csv, or .parquet) instead of NAME")
    p.add_argument("--csv", type=Path, metavar="readings.csv",
                   help="with NAME: also write the study's readings table (arms unblinded; "
                        "Parquet when it ends in .parquet)")
    p.add_argument("--reference", metavar="ARM", default=None,
                   help="the arm every other arm is compared with (default: unassisted)")
    p.add_argument("--out", type=Path, metavar="result.json", help="write the JSON result here")
    p.add_argument("--html", type=Path, metavar="report.html", help="write the HTML report here")
    add_db(p)
    p.set_defaults(func=run)


def _refusal(args: argparse.Namespace) -> str | None:
    if (args.name is None) == (args.readings is None):
        return "give a study NAME or --readings FILE (one of them)"
    if args.csv is not None and args.name is None:
        return "--csv writes a study's table from the database: give its NAME"
    for target in (args.out, args.html, args.csv):
        if target is not None and not target.parent.is_dir():
            return f"{target}: the folder {target.parent} does not exist"
    return None


def _from_database(args: argparse.Namespace) -> Any:
    """The study's readings, checked like a file's; the table written when asked."""
    import getpass

    from rrg_review.app.accounts.audit import AuditLog
    from rrg_review.app.reader_study.table import readings_table
    from rrg_review.app.settings import Settings
    from rrg_review.reader_study.readings import from_columns

    db = Settings.from_args(args.db, args.data_dir).open_database(create=False)
    table = readings_table(db, args.name, unblind=True)
    AuditLog(db).record("study_unblind", actor=f"cli:{getpass.getuser()}", address="cli",
                        target=f"reader study {args.name}", detail="study analyze")
    if args.csv is not None:
        print(table.write(args.csv))
    return from_columns(table.columns, source=f"study {args.name}")


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.reader_study.service import ReaderStudyError
    from rrg_review.reader_study.analysis import AnalysisError, analyze
    from rrg_review.reader_study.readings import ReadingsError, load
    from rrg_review.reader_study.report import write_html, write_json

    refusal = _refusal(args)
    if refusal is not None:
        print(f"error: {refusal}", file=sys.stderr)
        return 2
    try:
        readings = load(args.readings) if args.readings else _from_database(args)
        result = analyze(readings, args.reference)
    except (ReadingsError, AnalysisError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ReaderStudyError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot write {exc.filename or 'the table'}: {exc.strerror or exc}",
              file=sys.stderr)
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
