"""`rrg-review export`: the evaluation report of the review session (HTML, CSV or JSON),
audited like the page's export."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rrg_review.app.cli.options import add_chexbert, add_db, metric_names


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("export", help="evaluation report of the review session "
                              "(HTML/CSV/JSON)")
    add_chexbert(p)
    p.add_argument("--format", required=True, choices=("html", "csv", "json"))
    p.add_argument("--out", required=True, type=Path, metavar="PATH")
    p.add_argument("--model", metavar="PRESET", help="only drafts of this preset")
    p.add_argument("--reader", metavar="NAME", help="only this reader's reviews")
    p.add_argument("--source", metavar="SOURCE", help="only studies of this dataset")
    p.add_argument("--since", metavar="YYYY-MM-DD", help="only reviews saved since this date")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N")
    p.add_argument("--metrics", metavar="LIST",
                   help="comma-separated sets (rrg24, rexrank), metrics or keys (default rrg24)")
    p.add_argument("--offline", action="store_true", help="never download metric weights")
    p.add_argument("--dataset-keys", action="store_true",
                   help="show the datasets' own study keys instead of opaque ids (may carry "
                        "names or MRNs from folder names)")
    add_db(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import getpass
    from datetime import date

    from rrg_review.app.accounts.audit import AuditLog
    from rrg_review.app.evaluation.export import ExportFilters, export
    from rrg_review.app.settings import Settings
    from rrg_review.metrics.registry import build

    settings = Settings.from_args(args.db, chexbert_weights=args.chexbert_weights)
    out: Path = args.out
    if out.is_dir():  # (the report's rename onto a folder: IsADirectoryError, a traceback)
        print(f"error: --out {out} is a folder: name the file to write "
              f"(e.g. {out / f'evaluation.{args.format}'})", file=sys.stderr)
        return 2
    try:
        since = date.fromisoformat(args.since) if args.since else None
    except ValueError:
        print(f"error: --since {args.since!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
        return 2
    try:
        metrics = build(metric_names(args.metrics),
                        settings.metric_config(download=not args.offline))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    db = settings.open_database(create=False)
    files = export(db, args.format, args.out,
                   ExportFilters(args.model, args.reader, args.source, since,
                                 dataset_keys=args.dataset_keys), metrics,
                   n_resamples=args.bootstrap)
    scope = f"reader {args.reader}" if args.reader else "all readers"
    AuditLog(db).record("export", actor=f"cli:{getpass.getuser()}", address="cli",
                        target=f"{args.format}: {scope}",
                        detail="dataset keys" if args.dataset_keys else None)
    for path in files:
        print(path)
    return 0
