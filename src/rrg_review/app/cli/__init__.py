"""`rrg-review`: the command-line face of the same services the UI calls.

One module per command, each with `add_parser(subparsers)` (its options) and `run(args)` (its
body, returning the exit status). The modules import only argparse-level things at the top;
what a command needs (SQLAlchemy, torch, the metric packages) is imported inside its `run`, so
`rrg-review --help` stays instant and loads no heavy library.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from rrg_review.app.cli import (
    audit,
    backup,
    check,
    draft,
    export,
    import_studies,
    metrics,
    migrate_db,
    models,
    readers,
    score,
    serve,
    studies,
    study,
    suggest_errors,
)
from rrg_review.app.logs import LEVELS, configure_logging

# in the order `rrg-review --help` lists them
COMMANDS = (serve, import_studies, draft, score, models, metrics, export, backup, check, audit,
            readers, migrate_db, studies, study, suggest_errors)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rrg-review",
        description="Review workstation for AI-drafted chest X-ray reports.",
    )
    parser.add_argument("--log-level", type=str.upper, choices=LEVELS, default=None,
                        help="log level of rrg-review's own messages, on stderr (default "
                             "$RRG_REVIEW_LOG_LEVEL or WARNING)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:  # app/serve.py parses its own options
        return serve.run_argv(argv[1:])
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    os.umask(0o077)  # databases, keys, backups and exports are private to this user
    from rrg_review.app.settings import SettingsError, resolve_log_level

    configure_logging(resolve_log_level(args.log_level))
    from sqlalchemy.exc import DBAPIError

    from rrg_review.db.engine import DatabaseProblem, describe

    try:
        return handler(args)
    except (DatabaseProblem, SettingsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DBAPIError as exc:
        print(f"error: {describe(exc, getattr(args, 'db', None) or 'the database')}",
              file=sys.stderr)
        return 2
