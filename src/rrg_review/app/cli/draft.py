"""`rrg-review draft`: findings and impression of stored studies drafted by a model preset,
here (`--engine local`) or on Ray Data actors (`--engine ray`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rrg_review.app.cli.options import (
    add_db,
    add_ray,
    add_runtime,
    runtime,
    tqdm_progress,
)
from rrg_review.core.progress import Progress


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("draft", help="draft findings/impression of stored studies with a "
                              "model")
    p.add_argument("--model", metavar="PRESET",
                   help="model preset (see `rrg-review models`; default: rrg24-baseline if "
                        "cached, else the offline retrieval preset)")
    p.add_argument("--section", default="both", choices=("findings", "impression", "both"))
    p.add_argument("--split", help="only studies of this dataset split (e.g. test)")
    p.add_argument("--source", help="only studies of this source dataset")
    p.add_argument("--limit", type=int, metavar="N", help="at most N studies")
    p.add_argument("--batch-size", type=int, metavar="N",
                   help="studies per batch (halved automatically on out-of-memory)")
    p.add_argument("--redo", action="store_true", help="draft again studies already drafted")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="local: this process (default); ray: Ray Data actors, one model each "
                        "(pip install 'rrg-review[scale]')")
    add_ray(p, "Ray actors, one model replica each")
    add_runtime(p)
    add_db(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rrg_review.app.drafting.service import DraftingService, default_preset
    from rrg_review.app.ingest.catalog import study_ids
    from rrg_review.app.settings import Settings
    from rrg_review.model.hub import ModelUnavailable
    from rrg_review.model.presets import UnknownPreset

    settings = Settings.from_args(args.db, args.data_dir, presets=args.presets)
    db = settings.open_database(create=False)
    try:
        service = DraftingService(db, settings, runtime(args, settings))
        preset = args.model or default_preset(service.presets)
        service.preset(preset)
    except (UnknownPreset, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ids = study_ids(db, split=args.split, source=args.source, limit=args.limit)
    sections = ("findings", "impression") if args.section == "both" else (args.section,)
    progress = tqdm_progress(f"draft {preset}", "study")
    try:
        drafted = _draft(args, service, ids, preset, sections, progress)
    except (ModelUnavailable, ValueError) as exc:
        progress(-1, None)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        service.unload()
    progress(-1, None)
    _print_run(preset, drafted)
    return 1 if drafted.failed else 0


def _draft(args: argparse.Namespace, service: Any, ids: list[int], preset: str,
           sections: tuple[str, ...], progress: Progress) -> Any:
    if args.engine != "ray":
        return service.draft(ids, preset, sections, redo=args.redo,
                             batch_size=args.batch_size, progress=progress)
    from rrg_review.app.drafting.ray_engine import RayConfig, RayUnavailable, draft_on_ray

    config = RayConfig(address=args.address, workers=args.workers,
                       gpus_per_worker=args.gpus_per_worker, batch_size=args.batch_size or 8)
    try:
        return draft_on_ray(service, ids, preset, sections, config, redo=args.redo,
                            progress=progress)
    except RayUnavailable as exc:
        raise ValueError(str(exc)) from exc


def _print_run(preset: str, run: Any) -> None:
    print(f"{preset}: {run.drafted} sections drafted, {run.failed} failed, "
          f"{run.skipped} of {run.studies} studies already drafted"
          + (f", {run.no_images} report-only (no images: nothing to draft from)"
             if run.no_images else ""))
    for study_id, section, error in run.errors[:20]:
        print(f"  study {study_id} {section}: {error}", file=sys.stderr)
