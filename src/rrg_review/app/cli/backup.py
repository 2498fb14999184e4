"""`rrg-review backup --out FILE`: an online, consistent copy of the database."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rrg_review.app.cli.options import add_db


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("backup", help="online, consistent copy of the database (SQLite "
                              "backup API)")
    p.add_argument("--out", required=True, type=Path, metavar="FILE")
    add_db(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.settings import ENV_KEY, Settings
    from rrg_review.db.engine import backup

    db = Settings.from_args(args.db).open_database(upgrade=False, create=False)
    out = backup(db, args.out)
    print(f"backup of {db.name} written to {out} ({out.stat().st_size:,} bytes)")
    key = db.key_file
    if db.configured_key:
        print(f"the pseudonym key is not in the backup: keep ${ENV_KEY} with it")
    elif key is not None and key.is_file():
        print(f"the pseudonym key is not in the backup: keep a copy of {key} with it "
              "(apart from the database, e.g. in a password manager)")
    return 0
