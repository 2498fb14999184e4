"""`rrg-review`: the command-line face of the same services the UI calls.

Heavy imports happen inside the sub-command handlers so `rrg-review --help` stays instant.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from studies.importers.base import IMPORTER_NAMES


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="PATH_OR_URL",
        help="SQLite file or SQLAlchemy URL (default: $RRG_REVIEW_DB or ./rrg-review.sqlite)",
    )
    parser.add_argument(
        "--data-dir", metavar="DIR",
        help="where embedded images are stored (default: $RRG_REVIEW_DATA or <db>-data/)",
    )


def _tqdm_progress(desc: str, unit: str):
    """A Progress callback drawing a tqdm bar (closed by calling it with done=-1)."""
    from tqdm import tqdm

    bar = tqdm(desc=desc, unit=unit, dynamic_ncols=True, disable=None)

    def progress(done: int, total: int | None) -> None:
        if done < 0:
            bar.close()
            return
        if total is not None and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return progress


def cmd_import(args: argparse.Namespace) -> int:
    from app.services.ingest import import_path
    from app.settings import Settings
    from db.engine import open_database
    from studies.errors import StudyLoadError

    settings = Settings.from_args(args.db, args.data_dir)
    db = open_database(settings.db_url)
    progress = _tqdm_progress(f"import {args.source.name}", "study")
    try:
        report = import_path(
            db, args.source, blobs=settings.blobs, fmt=args.format,
            images=args.images, progress=progress,
        )
    except StudyLoadError as exc:
        progress(-1, None)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    progress(-1, None)
    print(
        f"{report.format}: {report.added} studies added ({report.images} images), "
        f"{report.already_present} already present, {report.failed} failed"
    )
    for problem in report.problems[: args.show_errors]:
        print(f"  failed: {problem}", file=sys.stderr)
    if report.failed > args.show_errors:
        print(f"  ... and {report.failed - args.show_errors} more", file=sys.stderr)
    return 1 if report.failed else 0


def cmd_studies(args: argparse.Namespace) -> int:
    from sqlalchemy import func, select

    from app.settings import Settings
    from db.engine import open_database
    from db.models import Study
    from db.store import counts

    db = open_database(Settings.from_args(args.db).db_url)
    with db.read() as session:
        c = counts(session)
        per_source = session.execute(
            select(Study.source, func.count(Study.id)).group_by(Study.source)
        ).all()
    print(f"{c.studies} studies, {c.patients} patients, {c.images} images, "
          f"{c.references} reference reports ({c.with_both_sections} with findings and impression)")
    for source, n in per_source:
        print(f"  {source}: {n}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rrg-review",
        description="Review workstation for AI-drafted chest X-ray reports.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("import", help="import studies from a dataset folder or file")
    p.add_argument("source", type=Path, help="dataset folder, archive or metadata file")
    p.add_argument("--format", default="auto", choices=("auto", *IMPORTER_NAMES))
    p.add_argument("--images", type=Path, metavar="DIR",
                   help="image root when images live apart from the reports (e.g. NLMCXR_png)")
    p.add_argument("--show-errors", type=int, default=20, metavar="N",
                   help="print at most N failed studies (default 20)")
    _add_db(p)
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("studies", help="count the stored studies per source")
    _add_db(p)
    p.set_defaults(func=cmd_studies)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
