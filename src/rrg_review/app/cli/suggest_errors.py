"""`rrg-review suggest-errors`: the ReXVal error counts that edits suggest, for pairs of draft and
final text in a JSONL file (the same logic as the review page's pre-filled ratings, issue #22),
so it can be checked and used on other studies.

Exit 0: every line read; 1: some lines were bad (each reported with its number on stderr, the
others written); 2: the input cannot be read or the output cannot be written (nothing written)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
_LOG_EVERY = 10_000  # pairs between progress lines in the log (the bar needs a terminal)


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("suggest-errors", help="ReXVal error counts suggested by draft -> "
                              "final edits (JSONL in, JSONL out)")
    p.add_argument("--pairs", required=True, type=Path, metavar="IN.jsonl",
                   help='one {"id", "draft", "final"} object per line')
    p.add_argument("--out", required=True, type=Path, metavar="OUT.jsonl",
                   help='one {"id", "errors": {category: count}, "spans": [...]} per pair, '
                        "written atomically")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from rrg_review.core.files import atomic_write
    from rrg_review.metrics.findings.extract import FindingExtractor
    from rrg_review.metrics.findings.pairs import BadLine, read_edit_pairs, suggestion_record
    from rrg_review.metrics.findings.suggest import suggest_errors

    if not args.pairs.is_file():
        print(f"error: {args.pairs}: no such file (or not a file)", file=sys.stderr)
        return 2
    if not args.out.parent.is_dir():
        print(f"error: {args.out}: its folder does not exist", file=sys.stderr)
        return 2
    extractor = FindingExtractor()
    bad: list[BadLine] = []
    done = 0
    progress = None if args.no_progress else _progress()

    def write(tmp: Path) -> None:
        nonlocal done
        with open(tmp, "w", encoding="utf-8") as out:
            for item in read_edit_pairs(args.pairs):
                if isinstance(item, BadLine):
                    bad.append(item)
                    print(f"{args.pairs}:{item.line}: skipped: {item.reason}", file=sys.stderr)
                    continue
                suggestion = suggest_errors(item.draft, item.final, extractor)
                record = suggestion_record(item.id, suggestion, item.draft, item.final)
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                done += 1
                if progress is not None:
                    progress(done, None)
                if done % _LOG_EVERY == 0:
                    log.info("%s: %d pairs done", args.pairs, done)

    try:
        atomic_write(args.out, write, mode=0o644)
    except (OSError, UnicodeError) as exc:
        print(f"error: {args.pairs} -> {args.out}: {exc}", file=sys.stderr)
        return 2
    finally:
        if progress is not None:
            progress(-1, None)
    print(f"{done} pair(s) written to {args.out}" + (f", {len(bad)} bad line(s) skipped"
                                                    if bad else ""), file=sys.stderr)
    return 1 if bad else 0


def _progress() -> Any:
    from rrg_review.app.cli.options import tqdm_progress

    return tqdm_progress("suggest-errors", "pairs")
