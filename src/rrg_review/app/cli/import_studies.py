"""`rrg-review import`: studies from a dataset folder, archive or metadata file.

Exit 0: everything imported; 1: some records failed (listed); 2: layout error, nothing stored;
130: interrupted. Never a traceback: an unexpected error is printed as one line."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from rrg_review.app.cli.options import add_db, tqdm_progress
from rrg_review.studies.importers.base import IMPORTER_NAMES

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("import", help="import studies from a dataset folder or file")
    p.add_argument("source", type=Path, help="dataset folder, archive or metadata file")
    p.add_argument("--format", default="auto", choices=("auto", *IMPORTER_NAMES))
    p.add_argument("--images", type=Path, metavar="DIR",
                   help="image root when images live apart from the reports (e.g. NLMCXR_png)")
    p.add_argument("--show-errors", type=int, default=20, metavar="N",
                   help="print at most N failed studies (default 20)")
    p.add_argument("--follow-symlinks", action="store_true",
                   help="follow symbolic links inside the dataset (refused by default)")
    p.add_argument("--allow-modality", action="append", default=[], metavar="M[,M]",
                   help="accept DICOM modalities besides CR/DX (e.g. DX,OT; ANY: no modality or "
                        "body-part check)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="processes that check images (default: $RRG_REVIEW_IMPORT_WORKERS, "
                        "else one per CPU core)")
    p.add_argument("--keep-folder-names", action="store_true",
                   help="a plain folder of images (no StudyInstanceUID) keeps its path as its "
                        "study key; by default the key is a pseudonym, as folder names often "
                        "name the patient")
    p.add_argument("--no-worklists", action="store_true",
                   help="leave readers' worklists as they are (default: every reader who has a "
                        "worklist gets the newly stored studies with images at its end)")
    add_db(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.ingest.service import import_path
    from rrg_review.app.settings import Settings
    from rrg_review.db.engine import DatabaseProblem
    from rrg_review.studies.errors import StudyLoadError

    try:
        settings = Settings.from_args(args.db, args.data_dir)
    except ValueError as exc:  # a bad RRG_REVIEW_IMPORT_WORKERS
        print(f"error: {exc}", file=sys.stderr)
        return 2
    progress = tqdm_progress(f"import {args.source.name}", "study")
    allow = [m for part in args.allow_modality for m in part.split(",")]
    db = None
    try:
        db = settings.open_database()
        report = import_path(
            db, args.source, blobs=settings.blobs, fmt=args.format, images=args.images,
            follow_symlinks=args.follow_symlinks, allow_modality=allow,
            workers=args.workers if args.workers is not None else settings.import_workers,
            progress=progress, keep_folder_names=args.keep_folder_names,
        )
        placed = None if args.no_worklists or not report.added else _placed(db)
    except (StudyLoadError, DatabaseProblem) as exc:  # nothing stored: one sentence, exit 2
        progress(-1, None)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        progress(-1, None)
        print("interrupted: studies written so far are complete; run the import again to "
              "finish", file=sys.stderr)
        return 130
    except Exception as exc:  # never a traceback for a user (it is in the log at DEBUG)
        log.debug("import of %s failed", args.source, exc_info=True)
        progress(-1, None)
        print(f"error: import failed ({type(exc).__name__}: {exc})", file=sys.stderr)
        return 1
    finally:
        if db is not None:
            db.dispose()
    progress(-1, None)
    _print_report(report, args.show_errors)
    if placed is not None and placed[0]:
        readers, studies = placed
        print(f"worklists: {studies} study places added for {readers} reader(s) who have a "
              "worklist (--no-worklists: none)")
    return 1 if report.failed else 0


def _placed(db: Any) -> tuple[int, int] | None:
    from rrg_review.db.engine import DatabaseProblem

    try:
        return _onto_worklists(db)
    except DatabaseProblem as exc:  # the studies are stored: only the worklists wait
        print(f"warning: the studies are stored, but not yet on readers' worklists ({exc}); "
              "run the import again to place them", file=sys.stderr)
        return None


def _onto_worklists(db: Any) -> tuple[int, int]:
    """The newly stored studies go on every existing worklist, as a new reader gets every
    stored study: imported after the readers, a dataset never reached them (a new-user trial
    imported two studies and never saw them). A reader with nothing on their worklist yet gets
    every stored study at their first page load, these included. Returns (readers, study
    places added)."""
    from rrg_review.app.worklist.service import WorklistService

    return WorklistService(db).extend_every_worklist()


def _print_report(report: Any, show: int) -> None:
    print(report.summary())
    for note in report.notes[:show]:
        print(f"  skipped: {note}", file=sys.stderr)
    if len(report.notes) > show:
        print(f"  ... and {len(report.notes) - show} more skipped", file=sys.stderr)
    for repeat in report.repeats[:show]:
        print(f"  again: {repeat}", file=sys.stderr)
    if len(report.repeats) > show:
        print(f"  ... and {len(report.repeats) - show} more met again", file=sys.stderr)
    for problem in report.problems[:show]:
        print(f"  failed: {problem}", file=sys.stderr)
    if report.failed > show:
        print(f"  ... and {report.failed - show} more", file=sys.stderr)
