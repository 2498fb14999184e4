"""`rrg-review audit`: the audit trail (logins, refusals, saves, ratings, exports)."""

from __future__ import annotations

import argparse
from typing import Any

from rrg_review.app.cli.options import add_db


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("audit", help="the audit trail: logins, failed logins, saves, "
                              "ratings, exports (who, what, when, from where)")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="the last N events (50)")
    p.add_argument("--actor", metavar="NAME", help="only this account")
    p.add_argument("--action", metavar="ACTION", help="only this action (e.g. login_failed)")
    add_db(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.accounts.audit import AuditLog
    from rrg_review.app.settings import Settings

    db = Settings.from_args(args.db).open_database(read_only=True, upgrade=False)
    for e in reversed(AuditLog(db).recent(args.limit, actor=args.actor, action=args.action)):
        print(f"{e.at:%Y-%m-%d %H:%M:%S}\t{e.actor or '-'}\t{e.action}\t"
              f"{'ok' if e.ok else 'REFUSED'}\t{e.address or '-'}\t{e.target or ''}"
              + (f"\t{e.detail}" if e.detail else ""))
    return 0
