"""`rrg-review studies`: how many studies, patients, images and reports are stored, per
source."""

from __future__ import annotations

import argparse
from typing import Any

from rrg_review.app.cli.options import add_db


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("studies", help="count the stored studies per source")
    add_db(p)
    p.add_argument("--read-only", action="store_true",
                   help="count in a database this user cannot write (an archive, a read-only "
                        "mount): nothing is upgraded or written")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.ingest.catalog import inventory
    from rrg_review.app.settings import Settings

    settings = Settings.from_args(args.db)
    db = (settings.open_database(read_only=True, upgrade=False) if args.read_only
          else settings.open_database(create=False))
    stored = inventory(db)
    c, per_source = stored.totals, stored.per_source
    print(f"{c.studies} studies, {c.patients} patients, {c.images} images, "
          f"{c.references} reference reports ({c.with_both_sections} with findings and impression)")
    for source, n in per_source:
        print(f"  {source}: {n}")
    return 0
