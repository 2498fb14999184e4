"""`rrg-review migrate-db --from SQLITE --to URL`: a single-user SQLite database copied into a
team's (empty) PostgreSQL database."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("migrate-db", help="copy a single-user SQLite database into a "
                              "team's PostgreSQL database")
    p.add_argument("--from", dest="source", required=True, metavar="SQLITE",
                   help="the SQLite file (or URL) to copy")
    p.add_argument("--to", dest="target", required=True, metavar="URL",
                   help="the empty target, e.g. postgresql+psycopg://user@host:5432/rrg")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from rrg_review.app.settings import Settings
    from rrg_review.db.engine import sqlite_path
    from rrg_review.db.transfer import TransferError, copy_database

    settings = Settings.from_args(args.source)
    source_url = settings.db_url
    path = sqlite_path(source_url)
    if path is not None and not path.is_file():
        print(f"error: {path}: no such database file", file=sys.stderr)
        return 2
    if "://" not in args.target:
        print(f"error: --to {args.target!r} is not a database URL "
              "(e.g. postgresql+psycopg://user@host/rrg)", file=sys.stderr)
        return 2
    try:
        source = settings.open_database()
        target = settings.open_database(args.target)
        report = copy_database(source, target)
    except TransferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc  # the driver's error, when there is one
        print(f"error: {type(cause).__name__}: {str(cause).strip()}",
              file=sys.stderr)
        return 1
    print(f"copied {report.total} rows into {target.engine.url.render_as_string()}: "
          + ", ".join(f"{n} {t}" for t, n in report.rows.items() if n))
    data = Settings.from_args(source_url).data_dir
    if data.is_dir():
        print(f"images stay where they are; embedded ones are in {data}: give the team's "
              f"commands --data-dir {data} (or a copy of it)")
    return 0
