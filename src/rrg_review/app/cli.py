"""`rrg-review`: the command-line face of the same services the UI calls.

Heavy imports happen inside the sub-command handlers so `rrg-review --help` stays instant.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from rrg_review.app.logs import LEVELS, configure_logging
from rrg_review.studies.importers.base import IMPORTER_NAMES

log = logging.getLogger(__name__)


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db", metavar="PATH_OR_URL",
        help="SQLite file or SQLAlchemy URL (default: $RRG_REVIEW_DB or ./rrg-review.sqlite)",
    )
    parser.add_argument(
        "--data-dir", metavar="DIR",
        help="where embedded images are stored (default: $RRG_REVIEW_DATA or <db>-data/)",
    )


def _add_chexbert(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--chexbert-weights", metavar="PTH",
                        help="a chexbert.pth for CheXbert F1 and SembScore (default "
                             "$RRG_REVIEW_CHEXBERT, else the hub's StanfordAIMI/RRG_scorers copy)")


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
    """Exit 0: everything imported; 1: some records failed (listed); 2: layout error, nothing
    stored. Never a traceback: an unexpected error is printed as one line."""
    from rrg_review.app.ingest.service import import_path
    from rrg_review.app.settings import Settings
    from rrg_review.db.engine import DatabaseProblem
    from rrg_review.studies.errors import StudyLoadError

    try:
        settings = Settings.from_args(args.db, args.data_dir)
    except ValueError as exc:  # a bad RRG_REVIEW_IMPORT_WORKERS
        print(f"error: {exc}", file=sys.stderr)
        return 2
    progress = _tqdm_progress(f"import {args.source.name}", "study")
    allow = [m for part in args.allow_modality for m in part.split(",")]
    db = None
    try:
        db = settings.open_database()
        report = import_path(
            db, args.source, blobs=settings.blobs, fmt=args.format, images=args.images,
            follow_symlinks=args.follow_symlinks, allow_modality=allow,
            workers=args.workers if args.workers is not None else settings.import_workers,
            progress=progress,
        )
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
    print(report.summary())
    for note in report.notes[: args.show_errors]:
        print(f"  skipped: {note}", file=sys.stderr)
    if len(report.notes) > args.show_errors:
        print(f"  ... and {len(report.notes) - args.show_errors} more skipped", file=sys.stderr)
    for problem in report.problems[: args.show_errors]:
        print(f"  failed: {problem}", file=sys.stderr)
    if report.failed > args.show_errors:
        print(f"  ... and {report.failed - args.show_errors} more", file=sys.stderr)
    return 1 if report.failed else 0


def cmd_studies(args: argparse.Namespace) -> int:
    from rrg_review.app.ingest.catalog import inventory
    from rrg_review.app.settings import Settings

    db = Settings.from_args(args.db).open_database()
    stored = inventory(db)
    c, per_source = stored.totals, stored.per_source
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


def _runtime(args: argparse.Namespace, settings):
    """The drafting run's configuration; weights are downloaded only when neither --offline
    nor a missing network (`Settings.downloads`) forbids it."""
    from rrg_review.app.drafting.service import RuntimeConfig

    return RuntimeConfig(device=args.device, dtype=args.dtype,
                         batch_size=getattr(args, "batch_size", None),
                         download=not args.offline and settings.downloads(),
                         worker_python=args.worker_python,
                         presets_file=args.presets)


def cmd_draft(args: argparse.Namespace) -> int:
    from rrg_review.app.drafting.service import DraftingService, default_preset
    from rrg_review.app.ingest.catalog import study_ids
    from rrg_review.app.settings import Settings
    from rrg_review.model.hub import ModelUnavailable
    from rrg_review.model.presets import UnknownPreset

    settings = Settings.from_args(args.db, args.data_dir, presets=args.presets)
    db = settings.open_database()
    try:
        service = DraftingService(db, settings, _runtime(args, settings))
        preset = args.model or default_preset(service.presets)
        service.preset(preset)
    except (UnknownPreset, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    ids = study_ids(db, split=args.split, source=args.source, limit=args.limit)
    sections = ("findings", "impression") if args.section == "both" else (args.section,)
    progress = _tqdm_progress(f"draft {preset}", "study")
    try:
        if args.engine == "ray":
            from rrg_review.app.drafting.ray_engine import RayConfig, RayUnavailable, draft_on_ray

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
          f"{run.skipped} of {run.studies} studies already drafted"
          + (f", {run.no_images} report-only (no images: nothing to draft from)"
             if run.no_images else ""))
    for study_id, section, error in run.errors[:20]:
        print(f"  study {study_id} {section}: {error}", file=sys.stderr)
    return 1 if run.failed else 0


def cmd_models(args: argparse.Namespace) -> int:
    from rrg_review.app.settings import Settings, offline_by_choice
    from rrg_review.model.hub import ModelUnavailable, fetch
    from rrg_review.model.presets import UnknownPreset, get_preset, load_presets
    from rrg_review.model.registry import availability

    settings = Settings.from_args(presets=args.presets)
    # asked first, so a machine without network is told at once instead of after the hub's
    # retries (HF_HUB_OFFLINE set: the hub library refuses at once, naming the model)
    if (args.fetch_metrics or args.fetch) and settings.no_network \
            and not offline_by_choice(settings.environ):
        print(f"error: nothing can be fetched: {settings.no_network}", file=sys.stderr)
        return 2
    if args.fetch_metrics:
        from rrg_review.metrics.fetch import fetch_metric_models

        try:
            for line in fetch_metric_models():
                print(line, flush=True)
        except ModelUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        presets = load_presets(settings.presets_file)
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
        from rrg_review.app.settings import Settings
        from rrg_review.db.metric_cache import DatabaseScoreCache

        return DatabaseScoreCache(Settings.from_args(args.db).open_database())
    from rrg_review.metrics.cache import FileCache

    path = args.cache or Path.home() / ".cache" / "rrg-review" / "scores.sqlite"
    return FileCache(path)


def _paired(report, other_hyps, refs, args, cache) -> tuple[dict, dict[str, str]]:
    """Paired approximate-randomization test of the main predictions against --compare.

    Returns the tests by key, and the metrics whose run on the --compare side failed (retried
    once, like an export's): reported with the reason while the other metrics' tests go on."""
    from rrg_review.metrics.base import MetricUnavailable
    from rrg_review.metrics.scoring import attempt_rows
    from rrg_review.metrics.stats import paired_test

    out: dict = {}
    failures: dict[str, str] = {}
    for rows in report.rows.values():
        try:
            mb = attempt_rows(rows.metric, other_hyps, refs, cache, None, failures)
        except MetricUnavailable:
            continue  # in `failures` with its reason
        for r in paired_test(rows.matrix, mb, rows.metric.corpus, rows.metric.keys,
                             n_resamples=max(args.bootstrap, 200)):
            out[r.key] = {"predictions": r.a, "compare": r.b, "difference": r.difference,
                          "p_value": r.p_value, "n": r.n}
    return out, failures


def _requested_keys(names: list[str] | None, metrics) -> list[str]:
    """The keys to show: every key of a set or metric asked for, or just a key asked for."""
    from rrg_review.metrics.registry import SETS, resolve_names

    built = dict(zip(resolve_names(names), metrics, strict=True))
    keys: list[str] = []
    for raw in names or list(built):
        for item in SETS.get(raw, (raw,)):
            chosen = built[item].keys if item in built else (item,)
            keys += [k for k in chosen if k not in keys]
    return keys


def cmd_score(args: argparse.Namespace) -> int:
    from rrg_review.app.settings import Settings
    from rrg_review.metrics.expect import read_expected
    from rrg_review.metrics.pairs import PairsError, read_pairs
    from rrg_review.metrics.registry import build

    try:
        pairs = read_pairs(args.predictions, args.references, args.section,
                           args.empty_references)
        names = [m.strip() for m in args.metrics.split(",") if m.strip()] \
            if args.metrics else None
        config = Settings.from_args(args.db, chexbert_weights=args.chexbert_weights).metric_config(
            device=None if args.device == "auto" else args.device, download=not args.offline,
            bertscore_model=args.bertscore_model, bertscore_baseline=args.bertscore_baseline,
            bertscore_rescale=not args.no_rescale)
        metrics = build(names, config)
        expected = read_expected(args.expect) if args.expect else None
    except (PairsError, ValueError) as exc:  # ExpectError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not pairs.ids:
        print("error: no pair to score in this section", file=sys.stderr)
        return 2
    cache = _metric_cache(args)
    if args.engine == "ray":  # Ray computes what the cache lacks; score() then aggregates
        from rrg_review.app.drafting.ray_engine import (
            RayConfig,
            RayUnavailable,
            fill_score_cache_on_ray,
        )

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
    try:
        return _score_and_report(args, names, metrics, pairs, expected, progress, cache)
    finally:
        for metric in metrics:  # models freed, metric workers shut down
            metric.close()


def _score_and_report(args, names, metrics, pairs, expected, progress, cache) -> int:
    import json

    from rrg_review.core.files import atomic_write
    from rrg_review.metrics.base import by_reason
    from rrg_review.metrics.expect import compare
    from rrg_review.metrics.pairs import PairsError, read_pairs
    from rrg_review.metrics.scoring import score

    report = score(pairs.hyps, pairs.refs, metrics, cache, pairs.sources,
                   n_resamples=args.bootstrap, progress=progress)
    progress(-1, None)
    requested = _requested_keys(names, metrics)
    keep = [k for k in requested if k in report.values]
    out = {
        "n": report.n, "section": args.section,
        "metrics": {k: report.values[k] for k in keep},
        "metric_info": {k: report.meta[k] for k in requested if k in report.meta},
        "ci": {k: list(report.ci[k]) for k in keep if k in report.ci},
        "per_sample": [{"id": i, **{k: report.per_sample[k][j] for k in keep
                                    if k in report.per_sample}}
                       for j, i in enumerate(pairs.ids)],
        "unavailable": {k: v for k, v in report.unavailable.items()
                        if k in requested or not names},
        "by_source": {g: {k: v[k] for k in keep if k in v} | {"n": report.group_sizes[g]}
                      for g, v in report.groups.items()},
        "empty_references": (
            {"policy": "skip", "skipped": pairs.skipped} if args.empty_references == "skip"
            else {"policy": "score (as the reference scorer: an empty reference is scored as "
                            "an empty text)", "scored": pairs.empty_references}),
    }
    if args.compare:
        try:
            other = read_pairs(args.compare, args.references, args.section,
                               args.empty_references)
        except PairsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        out["paired"], failed = _paired(report, other.hyps, pairs.refs, args,
                                        cache=_metric_cache(args))
        for name, why in failed.items():
            out["unavailable"][f"{name} (paired test)"] = why
            print(f"warning: no paired test for {name}: {why}", file=sys.stderr)
    parity = None
    if expected is not None:
        parity = compare(expected, pairs.ids, report.per_sample)
        out["expect"] = {"file": str(args.expect), "tolerance": args.expect_tolerance,
                         "keys": {p.key: {"compared": p.compared, "max_abs_diff": p.max_abs_diff,
                                          "worst_id": p.worst_id, "missing": p.missing}
                                  for p in parity}}
    from rrg_review.app.evaluation.writers import json_ready

    text = json.dumps(json_ready(out), indent=2, allow_nan=False)  # not computable: null
    if args.out:
        atomic_write(Path(args.out), text + "\n")
    width = max([len(k) for k in out["metrics"]] + [10])
    empty = pairs.skipped if args.empty_references == "skip" else pairs.empty_references
    print(f"{report.n} pairs ({args.section})" + (
        (f", {len(empty)} with an empty reference skipped" if args.empty_references == "skip"
         else f", {len(empty)} with an empty reference scored as empty") if empty else ""))
    for key, value in out["metrics"].items():
        lo, hi = out["ci"].get(key, (float("nan"), float("nan")))
        paired = out.get("paired", {}).get(key)
        info = out["metric_info"].get(key, {})
        versus = (f"   vs --compare {paired['compare']:.4f} (diff {paired['difference']:+.4f}, "
                  f"p={paired['p_value']:.3g})" if paired else "")
        print(f"  {key:<{width}}  {value:.4f}  [{lo:.4f}, {hi:.4f}]  "
              f"({info.get('direction', '')}; {info.get('version', '')}){versus}")
    for reason, keys in by_reason(out["unavailable"]).items():
        print(f"  unavailable: {', '.join(keys)}: {reason}")
    failed_parity = False
    if parity is not None:
        if not parity:
            print(f"  expect: {args.expect} has no key this run reports")
            failed_parity = True
        for p in parity:
            ok = p.compared > 0 and p.max_abs_diff <= args.expect_tolerance
            failed_parity |= not ok
            print(f"  expect {p.key}: max |diff| {p.max_abs_diff:.3g} over {p.compared} pairs"
                  + (f" (worst id {p.worst_id})" if p.worst_id is not None else "")
                  + (f", {p.missing} expected ids not scored" if p.missing else "")
                  + ("  ok" if ok else f"  over tolerance {args.expect_tolerance:g}"))
    if args.out:
        print(f"written to {args.out}")
    if not keep:
        print("error: every requested metric is unavailable", file=sys.stderr)
        return 3
    return 1 if failed_parity else 0


def cmd_metrics(args: argparse.Namespace) -> int:
    """`metrics list` (every key, set, direction, version) and `metrics setup-worker NAME`."""
    import json

    from rrg_review.app.settings import Settings
    from rrg_review.metrics.registry import HEADLINE, SETS, build, resolve_names

    settings = Settings.from_args()

    if args.action == "setup-worker":
        from rrg_review.metrics.worker_client import (
            SPECS,
            WorkerMetric,
            selfcheck,
            setup_worker,
            workers_root,
        )

        if args.name not in SPECS:
            print(f"error: unknown worker metric {args.name!r} ({', '.join(SPECS)})",
                  file=sys.stderr)
            return 2
        print(f"setting up the {args.name} worker environment ...", flush=True)
        try:
            folder = setup_worker(args.name, args.dir or
                                  workers_root(settings.metric_workers_dir) / args.name,
                                  args.python)
        except (RuntimeError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"  {folder}")
        check = selfcheck(args.name, folder)
        if not check.get("ok"):
            print(f"error: the {args.name} worker's self-check failed: {check.get('error')}",
                  file=sys.stderr)
            return 2
        details = {k: v for k, v in check.items() if k != "ok"}
        print("  self-check ok" + (f": {json.dumps(details)}" if details else ""))
        if args.name == "selftest":
            worker = WorkerMetric(SPECS["selftest"], folder)
            try:
                value = worker.compute(["lungs clear"], ["lungs are clear"])[0]["selftest"]
            finally:
                worker.close()
            print(f"  round trip ok (selftest {value:.4f})")
        return 0
    try:
        names = resolve_names([args.name] if args.name else list(SETS))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for metric in build(names, settings.metric_config(download=False)):
        sets = [s for s, members in SETS.items() if metric.name in members]
        for key in metric.keys:
            star = " (headline)" if any(key in HEADLINE[s] for s in sets) else ""
            print(f"{key:<22} {metric.direction(key):<6} is better  {metric.version:<46} "
                  f"{','.join(sets)}{star}")
    return 0


def cmd_readers(args: argparse.Namespace) -> int:
    import getpass

    from rrg_review.app.accounts.service import AccountError, AccountService
    from rrg_review.app.settings import Settings
    from rrg_review.app.worklist.service import WorklistService

    db = Settings.from_args(args.db).open_database()
    accounts = AccountService(db)
    if args.action == "list":
        for account, can_login in accounts.accounts():
            print(f"{account.name}\t{account.role}\t"
                  f"{'login' if can_login else 'local, no login'}")
        return 0
    if not args.name:
        print(f"error: readers {args.action} needs a NAME", file=sys.stderr)
        return 2
    if args.action == "role":
        try:
            accounts.set_role(args.name, "admin" if args.admin else "reader")
        except AccountError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(f"reader {args.name} is now {'an admin' if args.admin else 'a reader'}")
        return 0
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if password != getpass.getpass("again: "):
            print("error: the passwords differ", file=sys.stderr)
            return 2
    try:
        if args.action == "password":
            accounts.set_password(args.name, password)
            print(f"password of {args.name} changed")
            return 0
        reader_id = accounts.add(args.name, password, "admin" if args.admin else "reader")
    except AccountError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    added = WorklistService(db).assign(
        reader_id, include_report_only=args.include_report_only) if not args.empty else 0
    role = "admin" if args.admin else "reader"
    print(f"{role} {args.name} added ({added} studies on the worklist)")
    return 0


def cmd_migrate_db(args: argparse.Namespace) -> int:
    """Copy a single-user SQLite database into a team's (empty) PostgreSQL database."""
    from sqlalchemy.exc import SQLAlchemyError

    from rrg_review.app.settings import Settings
    from rrg_review.db.engine import sqlite_path
    from rrg_review.db.transfer import TransferError, copy_database

    settings = Settings.from_args(args.source)
    source_url = settings.db_url
    path = sqlite_path(source_url)
    if path is not None and not path.is_file():
        print(f"error: {path}: no such database file", file=sys.stderr)
        return 2
    if "://" not in args.target:
        print(f"error: --to {args.target!r} is not a database URL "
              "(e.g. postgresql+psycopg://user@host/rrg)", file=sys.stderr)
        return 2
    try:
        source = settings.open_database()
        target = settings.open_database(args.target)
        report = copy_database(source, target)
    except TransferError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except SQLAlchemyError as exc:
        cause = getattr(exc, "orig", None) or exc  # the driver's error, when there is one
        print(f"error: {type(cause).__name__}: {str(cause).strip()}",
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
    import getpass
    from datetime import date

    from rrg_review.app.accounts.audit import AuditLog
    from rrg_review.app.evaluation.export import ExportFilters, export
    from rrg_review.app.settings import Settings
    from rrg_review.metrics.registry import build

    settings = Settings.from_args(args.db, chexbert_weights=args.chexbert_weights)
    try:
        since = date.fromisoformat(args.since) if args.since else None
    except ValueError:
        print(f"error: --since {args.since!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
        return 2
    try:
        names = [m.strip() for m in args.metrics.split(",") if m.strip()] \
            if args.metrics else None
        metrics = build(names, settings.metric_config(download=not args.offline))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    db = settings.open_database()
    files = export(db, args.format, args.out,
                   ExportFilters(args.model, args.reader, args.source, since,
                                 dataset_keys=args.dataset_keys), metrics,
                   n_resamples=args.bootstrap)
    scope = f"reader {args.reader}" if args.reader else "all readers"
    AuditLog(db).record("export", actor=f"cli:{getpass.getuser()}", address="cli",
                        target=f"{args.format}: {scope}",
                        detail="dataset keys" if args.dataset_keys else None)
    for path in files:
        print(path)
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    from rrg_review.app.settings import ENV_KEY, Settings
    from rrg_review.db.engine import backup

    db = Settings.from_args(args.db).open_database(upgrade=False)
    out = backup(db, args.out)
    print(f"backup of {db.name} written to {out} ({out.stat().st_size:,} bytes)")
    key = db.key_file
    if db.configured_key:
        print(f"the pseudonym key is not in the backup: keep ${ENV_KEY} with it")
    elif key is not None and key.is_file():
        print(f"the pseudonym key is not in the backup: keep a copy of {key} with it "
              "(apart from the database, e.g. in a password manager)")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    from rrg_review.app.accounts.audit import AuditLog
    from rrg_review.app.settings import Settings

    db = Settings.from_args(args.db).open_database(read_only=True, upgrade=False)
    for e in reversed(AuditLog(db).recent(args.limit, actor=args.actor, action=args.action)):
        print(f"{e.at:%Y-%m-%d %H:%M:%S}\t{e.actor or '-'}\t{e.action}\t"
              f"{'ok' if e.ok else 'REFUSED'}\t{e.address or '-'}\t{e.target or ''}"
              + (f"\t{e.detail}" if e.detail else ""))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from rrg_review.app.ingest.catalog import health_problems
    from rrg_review.app.settings import Settings

    db = Settings.from_args(args.db).open_database(read_only=True, upgrade=False)
    problems = health_problems(db, full=args.full)
    kind = "integrity_check" if args.full else "quick_check"
    if problems:
        for problem in problems[:20]:
            print(f"problem: {problem}", file=sys.stderr)
        print(f"{db.name}: {len(problems)} problem(s) found", file=sys.stderr)
        return 1
    print(f"{db.name}: ok (schema, {kind}, foreign keys, pseudonym key)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rrg-review",
        description="Review workstation for AI-drafted chest X-ray reports.",
    )
    parser.add_argument("--log-level", type=str.upper, choices=LEVELS, default=None,
                        help="log level of rrg-review's own messages, on stderr (default "
                             "$RRG_REVIEW_LOG_LEVEL or WARNING)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # listed for --help; main() hands `serve ...` to app/serve.py's own parser before this one
    sub.add_parser("serve", help="start the workstation in the browser (what `make run` does; "
                   "`rrg-review serve --help` for its options)")

    p = sub.add_parser("import", help="import studies from a dataset folder or file")
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

    p = sub.add_parser("score", help="score predictions against references (RRG24 and ReXrank "
                                     "metric sets)")
    _add_chexbert(p)
    p.add_argument("--predictions", required=True, type=Path, metavar="P",
                   help="JSONL ({id, findings, impression}) or text, one section per line")
    p.add_argument("--references", required=True, type=Path, metavar="R",
                   help="same format as the predictions")
    p.add_argument("--section", default="findings", choices=("findings", "impression"))
    p.add_argument("--metrics", metavar="LIST",
                   help="comma-separated sets (rrg24, rexrank), metrics or keys (default: "
                        "rrg24 = bleu4,rougeL,bertscore,radgraph,chexbert)")
    p.add_argument("--empty-references", choices=("score", "skip"), default="score",
                   help="a reference without text: scored as empty, as the reference scorer "
                        "does (default), or left out and listed")
    p.add_argument("--expect", type=Path, metavar="FILE",
                   help="JSON of expected per-pair values (e.g. from the reference code with the "
                        "real weights): report the max difference per key")
    p.add_argument("--expect-tolerance", type=float, default=1e-5, metavar="X",
                   help="exit 1 when a key differs from --expect by more (default 1e-5)")
    p.add_argument("--out", type=Path, help="write the JSON result here")
    p.add_argument("--compare", type=Path, metavar="P2",
                   help="a second system's predictions: adds a paired randomization test")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N",
                   help="bootstrap resamples for the 95%% CIs (0: none)")
    p.add_argument("--bertscore-model", metavar="MODEL",
                   help="another BERTScore model, hub id or local folder (reported as "
                        "bertscore[MODEL], or bertscore_raw[MODEL] with --no-rescale)")
    p.add_argument("--bertscore-baseline", metavar="TSV",
                   help="rescaling baseline file for --bertscore-model (bert-score's format)")
    p.add_argument("--no-rescale", action="store_true",
                   help="raw BERTScore F1, no baseline rescaling (reported as bertscore_raw…)")
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
                   help="download the metric models (distilbert, distilroberta, radgraph-xl, "
                        "radgraph, CheXbert) and list each file, size and sha256")
    p.add_argument("--presets", metavar="FILE", help="extra model presets (JSON)")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("metrics", help="list metric keys, or set up a metric worker environment")
    p.add_argument("action", choices=("list", "setup-worker"))
    p.add_argument("name", nargs="?", help="a set, metric or key (list); ratescore, green or "
                                           "selftest (setup-worker)")
    p.add_argument("--dir", type=Path, metavar="DIR",
                   help="where the worker's virtualenv goes (default "
                        "~/.cache/rrg-review/metric-workers/NAME or $RRG_REVIEW_METRIC_WORKERS)")
    p.add_argument("--python", metavar="PY", help="the Python that creates the virtualenv")
    p.set_defaults(func=cmd_metrics)

    p = sub.add_parser("export", help="evaluation report of the review session (HTML/CSV/JSON)")
    _add_chexbert(p)
    p.add_argument("--format", required=True, choices=("html", "csv", "json"))
    p.add_argument("--out", required=True, type=Path, metavar="PATH")
    p.add_argument("--model", metavar="PRESET", help="only drafts of this preset")
    p.add_argument("--reader", metavar="NAME", help="only this reader's reviews")
    p.add_argument("--source", metavar="SOURCE", help="only studies of this dataset")
    p.add_argument("--since", metavar="YYYY-MM-DD", help="only reviews saved since this date")
    p.add_argument("--bootstrap", type=int, default=1000, metavar="N")
    p.add_argument("--metrics", metavar="LIST",
                   help="comma-separated sets (rrg24, rexrank), metrics or keys (default rrg24)")
    p.add_argument("--offline", action="store_true", help="never download metric weights")
    p.add_argument("--dataset-keys", action="store_true",
                   help="show the datasets' own study keys instead of opaque ids (may carry "
                        "names or MRNs from folder names)")
    _add_db(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("backup", help="online, consistent copy of the database (SQLite backup "
                                      "API)")
    p.add_argument("--out", required=True, type=Path, metavar="FILE")
    _add_db(p)
    p.set_defaults(func=cmd_backup)

    p = sub.add_parser("check", help="check the database (schema, integrity, pseudonym key)")
    p.add_argument("--full", action="store_true",
                   help="PRAGMA integrity_check instead of the faster quick_check")
    _add_db(p)
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("audit", help="the audit trail: logins, failed logins, saves, ratings, "
                                     "exports (who, what, when, from where)")
    p.add_argument("--limit", type=int, default=50, metavar="N", help="the last N events (50)")
    p.add_argument("--actor", metavar="NAME", help="only this account")
    p.add_argument("--action", metavar="ACTION", help="only this action (e.g. login_failed)")
    _add_db(p)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("readers", help="reader accounts: add, list, password, role")
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        from rrg_review.app.serve import main as serve

        return serve(argv[1:])
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    os.umask(0o077)  # databases, keys, backups and exports are private to this user
    from rrg_review.app.settings import resolve_log_level

    configure_logging(resolve_log_level(args.log_level))
    from sqlalchemy.exc import DBAPIError

    from rrg_review.db.engine import DatabaseProblem, describe

    try:
        return handler(args)
    except DatabaseProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except DBAPIError as exc:
        print(f"error: {describe(exc, getattr(args, 'db', None) or 'the database')}",
              file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
