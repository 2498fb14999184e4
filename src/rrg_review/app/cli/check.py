"""`rrg-review check [--full]`: the database's schema, integrity and pseudonym key."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rrg_review.app.cli.options import add_db


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("check", help="check the database (schema, integrity, pseudonym "
                              "key)")
    p.add_argument("--full", action="store_true",
                   help="PRAGMA integrity_check instead of the faster quick_check")
    add_db(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.ingest.catalog import health_problems
    from rrg_review.app.settings import Settings

    db = Settings.from_args(args.db).open_database(read_only=True, upgrade=False)
    problems = health_problems(db, full=args.full)
    kind = "integrity_check" if args.full else "quick_check"
    if problems:
        for problem in problems[:20]:
            print(f"problem: {problem}", file=sys.stderr)
        print(f"{db.name}: {len(problems)} problem(s) found", file=sys.stderr)
        return 1
    print(f"{db.name}: ok (schema, {kind}, foreign keys, pseudonym key)")
    return 0
