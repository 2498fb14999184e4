"""`rrg-review readers add|list|password|role`: reader accounts."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rrg_review.app.cli.options import add_db


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("readers", help="reader accounts: add, list, password, role")
    p.add_argument("action", choices=("add", "list", "password", "role"))
    p.add_argument("name", nargs="?")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from standard input instead of prompting")
    p.add_argument("--empty", action="store_true",
                   help="start with an empty worklist (default: every stored study with "
                        "images)")
    p.add_argument("--admin", action="store_true",
                   help="add (or with `role`, make) an admin: may export every reader's work")
    p.add_argument("--include-report-only", action="store_true",
                   help="also put studies without images (report-only references) on the "
                        "new reader's worklist")
    add_db(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.accounts.service import AccountError, AccountService
    from rrg_review.app.settings import Settings

    settings = Settings.from_args(args.db)
    db = settings.open_database()
    accounts = AccountService(db, password_cost=settings.password_cost)
    if args.action == "list":
        for account, can_login in accounts.accounts():
            print(f"{account.name}\t{account.role}\t"
                  f"{'login' if can_login else 'local, no login'}")
        return 0
    if not args.name:
        print(f"error: readers {args.action} needs a NAME", file=sys.stderr)
        return 2
    try:
        if args.action == "role":
            accounts.set_role(args.name, "admin" if args.admin else "reader")
            print(f"reader {args.name} is now {'an admin' if args.admin else 'a reader'}")
            return 0
        password = _password(args)
        if password is None:
            print("error: the passwords differ", file=sys.stderr)
            return 2
        if args.action == "password":
            accounts.set_password(args.name, password)
            print(f"password of {args.name} changed")
            return 0
        reader_id = accounts.add(args.name, password, "admin" if args.admin else "reader")
    except AccountError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _fill_worklist(args, db, accounts, reader_id)
    return 0


def _password(args: argparse.Namespace) -> str | None:
    """From standard input, or prompted twice (None when the two differ)."""
    import getpass

    from rrg_review.app.accounts.service import AccountError

    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    if not sys.stdin.isatty():
        # (getpass on no terminal: termios.error, then EOFError, as tracebacks: a trial's
        # `readers add zed </dev/null`)
        raise AccountError("no terminal to ask the password on: give it on standard input "
                           "with --password-stdin")
    try:
        password = getpass.getpass(f"password for {args.name}: ")
        again = getpass.getpass("again: ")
    except EOFError:
        raise AccountError("no password given (the input ended)") from None
    return password if password == again else None


def _fill_worklist(args: argparse.Namespace, db: Any, accounts: Any, reader_id: int) -> None:
    from rrg_review.app.worklist.service import WorklistService

    added = WorklistService(db).assign(
        reader_id, include_report_only=args.include_report_only) if not args.empty else 0
    role = "admin" if args.admin else "reader"
    print(f"{role} {args.name} added ({added} studies on the worklist)")
