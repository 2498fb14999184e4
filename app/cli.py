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


def _add_runtime(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto (CUDA > MPS > CPU), cuda, cuda:N, "
                        "mps or cpu")
    parser.add_argument("--dtype", default="auto", help="auto (bf16/fp16 on GPU, fp32 on CPU), "
                        "bfloat16, float16 or float32")
    parser.add_argument("--presets", metavar="FILE",
                        help="extra model presets (JSON; default $RRG_REVIEW_PRESETS)")
    parser.add_argument("--worker-python", metavar="PYTHON",
                        help="interpreter of the separate environment for worker presets")
    parser.add_argument("--offline", action="store_true",
                        help="never download weights (as with HF_HUB_OFFLINE=1)")


def _runtime(args: argparse.Namespace):
    from app.services.drafting import RuntimeConfig

    return RuntimeConfig(device=args.device, dtype=args.dtype,
                         batch_size=getattr(args, "batch_size", None),
                         download=not args.offline, worker_python=args.worker_python,
                         presets_file=args.presets)


def cmd_draft(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from app.services.drafting import DraftingService, default_preset
    from app.settings import Settings
    from db.engine import open_database
    from db.models import Study
    from model.hub import ModelUnavailable
    from model.presets import UnknownPreset

    settings = Settings.from_args(args.db, args.data_dir)
    db = open_database(settings.db_url)
    try:
        service = DraftingService(db, settings, _runtime(args))
        preset = args.model or default_preset(service.presets)
        service.preset(preset)
    except (UnknownPreset, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    stmt = select(Study.id).order_by(Study.source, Study.study_date, Study.id)
    if args.split:
        stmt = stmt.where(Study.split == args.split)
    if args.source:
        stmt = stmt.where(Study.source == args.source)
    if args.limit:
        stmt = stmt.limit(args.limit)
    with db.read() as session:
        ids = list(session.scalars(stmt))
    sections = ("findings", "impression") if args.section == "both" else (args.section,)
    progress = _tqdm_progress(f"draft {preset}", "study")
    try:
        if args.engine == "ray":
            from app.services.ray_engine import RayConfig, RayUnavailable, draft_on_ray

            config = RayConfig(address=args.address, workers=args.workers,
                               gpus_per_worker=args.gpus_per_worker,
                               batch_size=args.batch_size or 8)
            try:
                run = draft_on_ray(service, ids, preset, sections, config, redo=args.redo,
                                   progress=progress)
            except RayUnavailable as exc:
                raise ValueError(str(exc)) from exc
        else:
            run = service.draft(ids, preset, sections, redo=args.redo,
                                batch_size=args.batch_size, progress=progress)
    except (ModelUnavailable, ValueError) as exc:
        progress(-1, None)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        service.unload()
    progress(-1, None)
    print(f"{preset}: {run.drafted} sections drafted, {run.failed} failed, "
          f"{run.skipped} of {run.studies} studies already drafted")
    for study_id, section, error in run.errors[:20]:
        print(f"  study {study_id} {section}: {error}", file=sys.stderr)
    return 1 if run.failed else 0


def cmd_models(args: argparse.Namespace) -> int:
    from model.hub import ModelUnavailable, fetch
    from model.presets import UnknownPreset, get_preset, load_presets
    from model.registry import availability

    if args.fetch_metrics:
        from metrics.fetch import fetch_metric_models

        try:
            for line in fetch_metric_models():
                print(line, flush=True)
        except ModelUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        presets = load_presets(args.presets)
        if args.fetch:
            preset = get_preset(presets, args.fetch)
            ids = list(preset.model_ids) + (
                [preset.options["encoder"]] if preset.options.get("encoder") else [])
            for model_id in ids:
                print(f"fetching {model_id} ...", flush=True)
                found = fetch(model_id, None, preset.name)
                print(f"  {found.path} (revision {found.revision})")
            if not ids:
                print(f"{preset.name} needs no download")
            return 0
    except (UnknownPreset, ValueError, ModelUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    width = max(len(n) for n in presets)
    for name, preset in sorted(presets.items()):
        ok, why = availability(preset)
        print(f"{name:<{width}}  {preset.backend:<22}  {'available' if ok else 'missing':<9}  "
              f"{why}")
        print(f"{'':<{width}}  {preset.description}")
    return 0


def _metric_cache(args: argparse.Namespace):
    """The database when --db is given, else a local cache file."""
    if args.db:
        from app.settings import Settings
        from db.engine import open_database
        from db.metric_cache import DatabaseScoreCache

        return DatabaseScoreCache(open_database(Settings.from_args(args.db).db_url))
    from metrics.cache import FileCache

    path = args.cache or Path.home() / ".cache" / "rrg-review" / "scores.sqlite"
    return FileCache(path)


def _paired(report, other_hyps, refs, args, cache) -> dict:
    """Paired approximate-randomization test of the main predictions against --compare."""
    from metrics.scoring import metric_rows
    from metrics.stats import paired_test

    out = {}
    for rows in report.rows.values():
        mb = metric_rows(rows.metric, other_hyps, refs, cache)
        for r in paired_test(rows.matrix, mb, rows.metric.corpus, rows.metric.keys,
                             n_resamples=max(args.bootstrap, 200)):
            out[r.key] = {"predictions": r.a, "compare": r.b, "difference": r.difference,
                          "p_value": r.p_value, "n": r.n}
    return out


def cmd_score(args: argparse.Namespace) -> int:
    import json

    from metrics.pairs import PairsError, read_pairs
    from metrics.registry import MetricConfig, build
    from metrics.scoring import score

    try:
        pairs = read_pairs(args.predictions, args.references, args.section)
        names = [m.strip() for m in args.metrics.split(",")] if args.metrics else None
        config = MetricConfig(
            device=None if args.device == "auto" else args.device, download=not args.offline,
            bertscore_model=args.bertscore_model)
        metrics = build(names, config)
    except (PairsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not pairs.ids:
        print("error: no pair has a reference text in this section", file=sys.stderr)
        return 2
    cache = _metric_cache(args)
    if args.engine == "ray":  # Ray computes what the cache lacks; score() then aggregates
        from app.services.ray_engine import RayConfig, RayUnavailable, fill_score_cache_on_ray

        ray_progress = _tqdm_progress("score on ray", "pair")
        try:
            cluster = RayConfig(address=args.address, workers=args.workers,
                                gpus_per_worker=args.gpus_per_worker, batch_size=args.batch_size)
            computed = fill_score_cache_on_ray(metrics, config, pairs.hyps, pairs.refs, cache,
                                               cluster, progress=ray_progress)
            print(f"ray: {computed} pair values computed (the rest were cached)")
        except RayUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        finally:
            ray_progress(-1, None)
    progress = _tqdm_progress("score", "pair")
    report = score(pairs.hyps, pairs.refs, metrics, cache, pairs.sources,
                   n_resamples=args.bootstrap, progress=progress)
    progress(-1, None)
    wanted = set(names or [])
    keep = [k for k in report.values if not wanted or k in wanted or
            any(k.startswith(n) for n in wanted)]
    out = {
        "n": report.n, "section": args.section,
        "metrics": {k: report.values[k] for k in keep},
        "ci": {k: list(report.ci[k]) for k in keep if k in report.ci},
        "per_sample": [{"id": i, **{k: report.per_sample[k][j] for k in keep}}
                       for j, i in enumerate(pairs.ids)],
        "unavailable": report.unavailable,
        "by_source": {g: {k: v[k] for k in keep if k in v} | {"n": report.group_sizes[g]}
                      for g, v in report.groups.items()},
        "skipped_without_reference": pairs.skipped,
    }
    if args.compare:
        try:
            other = read_pairs(args.compare, args.references, args.section)
        except PairsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        out["paired"] = _paired(report, other.hyps, pairs.refs, args, cache=_metric_cache(args))
    text = json.dumps(out, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    width = max([len(k) for k in out["metrics"]] + [10])
    print(f"{report.n} pairs ({args.section})" + (
        f", {len(pairs.skipped)} without a reference skipped" if pairs.skipped else ""))
    for key, value in out["metrics"].items():
        lo, hi = out["ci"].get(key, (float("nan"), float("nan")))
        paired = out.get("paired", {}).get(key)
        versus = (f"   vs --compare {paired['compare']:.4f} (diff {paired['difference']:+.4f}, "
                  f"p={paired['p_value']:.3g})" if paired else "")
        print(f"  {key:<{width}}  {value:.4f}  [{lo:.4f}, {hi:.4f}]{versus}")
    reasons: dict[str, list[str]] = {}
    for key, reason in report.unavailable.items():
        reasons.setdefault(reason, []).append(key)
    for reason, keys in reasons.items():
        print(f"  unavailable: {', '.join(keys)}: {reason}")
    if args.out:
        print(f"written to {args.out}")
    return 0


def cmd_readers(args: argparse.Namespace) -> int:
    import getpass

    from app.services.review import ReviewError, ReviewService
    from app.settings import Settings
    from db.engine import open_database

    review = ReviewService(open_database(Settings.from_args(args.db).db_url))
    if args.action == "list":
        from sqlalchemy import select

        from db.models import Reader

        with review.db.read() as session:
            for name, hashed in session.execute(select(Reader.name, Reader.password_hash)
                                                .order_by(Reader.name)):
                print(f"{name}\t{'login' if hashed else 'local, no login'}")
        return 0
    if not args.name:
        print("error: readers add needs a NAME", file=sys.stderr)
        return 2
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if password != getpass.getpass("again: "):
            print("error: the passwords differ", file=sys.stderr)
            return 2
    if len(password) < 8:
        print("error: use a password of at least 8 characters", file=sys.stderr)
        return 2
    try:
        reader_id = review.add_reader(args.name, password)
    except ReviewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    added = review.assign(reader_id) if not args.empty else 0
    print(f"reader {args.name} added ({added} studies on the worklist)")
    return 0


def cmd_migrate_db(args: argparse.Namespace) -> int:
    """Copy a single-user SQLite database into a team's (empty) PostgreSQL database."""
    from sqlalchemy.exc import SQLAlchemyError

    from app.settings import Settings
    from db.engine import open_database, sqlite_path
    from db.transfer import TransferError, copy_database

    source_url = Settings.from_args(args.source).db_url
    path = sqlite_path(source_url)
    if path is not None and not path.is_file():
        print(f"error: {path}: no such database file", file=sys.stderr)
        return 2
    if "://" not in args.target:
        print(f"error: --to {args.target!r} is not a database URL "
              "(e.g. postgresql+psycopg://user@host/rrg)", file=sys.stderr)
        return 2
    try:
        source = open_database(source_url)
        target = open_database(args.target)
        report = copy_database(source, target)
    except TransferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except SQLAlchemyError as exc:
        print(f"error: {type(exc.orig or exc).__name__}: {str(exc.orig or exc).strip()}",
              file=sys.stderr)
        return 1
    print(f"copied {report.total} rows into {target.engine.url.render_as_string()}: "
          + ", ".join(f"{n} {t}" for t, n in report.rows.items() if n))
    data = Settings.from_args(source_url).data_dir
    if data.is_dir():
        print(f"images stay where they are; embedded ones are in {data}: give the team's "
              f"commands --data-dir {data} (or a copy of it)")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from datetime import date

    from app.services.export import ExportFilters, export
    from app.settings import Settings
    from db.engine import open_database
    from metrics.registry import MetricConfig, build

    try:
        since = date.fromisoformat(args.since) if args.since else None
    except ValueError:
        print(f"error: --since {args.since!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
        return 2
    db = open_database(Settings.from_args(args.db).db_url)
    metrics = build(None, MetricConfig(download=not args.offline))
    files = export(db, args.format, args.out,
                   ExportFilters(args.model, args.reader, args.source, since), metrics,
                   n_resamples=args.bootstrap)
    for path in files:
        print(path)
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

    p = sub.add_parser("draft", help="draft findings/impression of stored studies with a model")
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
    p.add_argument("--address", help="Ray cluster to use (default: start a local one)")
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="Ray actors, one model replica each")
    p.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G")
    _add_runtime(p)
    _add_db(p)
    p.set_defaults(func=cmd_draft)

    p = sub.add_parser("score", help="score predictions against references (RRG24 metrics)")
    p.add_argument("--predictions", required=True, type=Path, metavar="P",
                   help="JSONL ({id, findings, impression}) or text, one section per line")
    p.add_argument("--references", required=True, type=Path, metavar="R",
                   help="same format as the predictions")
    p.add_argument("--section", default="findings", choices=("findings", "impression"))
    p.add_argument("--metrics", metavar="LIST",
                   help="comma-separated metrics or keys (default: bleu4,rougeL,bertscore,"
                        "radgraph,chexbert)")
    p.add_argument("--out", type=Path, help="write the JSON result here")
    p.add_argument("--compare", type=Path, metavar="P2",
                   help="a second system's predictions: adds a paired randomization test")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                   help="bootstrap resamples for the 95%% CIs (0: none)")
    p.add_argument("--bertscore-model", metavar="MODEL",
                   help="another BERTScore model (reported as bertscore[MODEL])")
    p.add_argument("--cache", type=Path, metavar="FILE",
                   help="cache file when no --db is given (default ~/.cache/rrg-review/)")
    p.add_argument("--db", metavar="PATH_OR_URL", help="cache scores in this database")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="ray: compute the pairs on Ray Data actors (pip install "
                        "'rrg-review[scale]'), then aggregate here")
    p.add_argument("--address", help="Ray cluster to use (default: start a local one)")
    p.add_argument("--workers", type=int, default=1, metavar="N")
    p.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G")
    p.add_argument("--batch-size", type=int, default=256, metavar="N",
                   help="pairs per Ray batch")
    p.add_argument("--device", default="auto")
    p.add_argument("--offline", action="store_true", help="never download metric weights")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("models", help="list model presets and whether each is available here")
    p.add_argument("--fetch", metavar="PRESET",
                   help="download the preset's weights into the Hugging Face cache")
    p.add_argument("--fetch-metrics", action="store_true",
                   help="download the metric models (distilbert, radgraph-xl, CheXbert)")
    p.add_argument("--presets", metavar="FILE", help="extra model presets (JSON)")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("export", help="evaluation report of the review session (HTML/CSV/JSON)")
    p.add_argument("--format", required=True, choices=("html", "csv", "json"))
    p.add_argument("--out", required=True, type=Path, metavar="PATH")
    p.add_argument("--model", metavar="PRESET", help="only drafts of this preset")
    p.add_argument("--reader", metavar="NAME", help="only this reader's reviews")
    p.add_argument("--source", metavar="SOURCE", help="only studies of this dataset")
    p.add_argument("--since", metavar="YYYY-MM-DD", help="only reviews saved since this date")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N")
    p.add_argument("--offline", action="store_true", help="never download metric weights")
    _add_db(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("readers", help="reader accounts (scrypt-hashed passwords)")
    p.add_argument("action", choices=("add", "list"))
    p.add_argument("name", nargs="?")
    p.add_argument("--password-stdin", action="store_true",
                   help="read the password from standard input instead of prompting")
    p.add_argument("--empty", action="store_true",
                   help="start with an empty worklist (default: every stored study)")
    _add_db(p)
    p.set_defaults(func=cmd_readers)

    p = sub.add_parser("migrate-db", help="copy a single-user SQLite database into a team's "
                       "PostgreSQL database")
    p.add_argument("--from", dest="source", required=True, metavar="SQLITE",
                   help="the SQLite file (or URL) to copy")
    p.add_argument("--to", dest="target", required=True, metavar="URL",
                   help="the empty target, e.g. postgresql+psycopg://user@host:5432/rrg")
    p.set_defaults(func=cmd_migrate_db)

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
