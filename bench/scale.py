"""Scale benchmark: the database side of opening a study and saving an edit on SQLite and on
PostgreSQL, one after the other in one run (same studies, same calls).

Database: the timed calls are the ones the Gradio handlers make against the database (the
study's rows, its drafts, the reader's revisions and rating; save: one revision in its own
transaction); image decoding is left out, since it does not depend on the database. PostgreSQL
is the server given by `--db URL`, else a throw-away local server started like the tests'
(Debian's binaries). Run: `.venv/bin/python bench/scale.py [--studies 500] [--db URL]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000, q))


def time_database(url: str, data_dir: Path, n: int) -> dict[str, list[float]]:
    from app.services.drafting import DraftingService
    from app.services.ingest import import_records
    from app.services.review import ReviewService
    from app.settings import Settings
    from db.engine import open_database
    from db.store import get_study
    from studies.records import ReportSections, StudyRecord

    settings = Settings.from_args(url, str(data_dir))
    db = open_database(settings.db_url)
    records = (StudyRecord(
        source="bench", study_key=f"S{i:05d}", patient_key=f"P{i // 2:05d}", origin="bench",
        study_date=date(2024, 1, 1) + timedelta(days=i), indication="Cough.",
        reference=ReportSections(f"Finding {i}: the lungs are clear.", "Normal."))
        for i in range(n))
    import_records(db, records, blobs=settings.blobs, fmt="bench")
    drafting = DraftingService(db, settings)
    review = ReviewService(db)
    reader = review.local_reader()
    review.assign(reader)
    ids = [w.study_id for w in review.worklist(reader)]
    opens, saves = [], []
    for study_id in ids:
        t = time.perf_counter()
        with db.read() as session:
            study = get_study(session, study_id)
            _ = [im.uri for im in study.images], study.reference
        drafting.latest(study_id, "retrieval")
        review.current(reader, study_id)
        review.latest_rating(reader, study_id)
        review.worklist(reader)
        opens.append(time.perf_counter() - t)
        t = time.perf_counter()
        review.save(reader, study_id, "findings", f"Edited {study_id}.", None)
        saves.append(time.perf_counter() - t)
    db.dispose()
    return {"open (database part)": opens, "save an edit": saves}


def database_section(args: argparse.Namespace) -> None:
    server = None
    url = args.db
    if url is None:
        from tests.postgres_server import NoPostgres, start_server

        try:
            server = start_server()
        except NoPostgres as exc:
            print(f"PostgreSQL: skipped ({exc})")
            return
        url = server.create_database("rrg_bench")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            results = {"SQLite": time_database(str(Path(tmp) / "bench.sqlite"),
                                               Path(tmp) / "data-sqlite", args.studies),
                       "PostgreSQL": time_database(url, Path(tmp) / "data-pg", args.studies)}
    finally:
        if server is not None:
            server.drop_database(url)
            server.stop()
    print(f"database, {args.studies} studies, one reader (p50 / p95 / p99 ms):")
    for name in ("open (database part)", "save an edit"):
        for backend, figures in results.items():
            xs = figures[name]
            print(f"  {name:<22} {backend:<10} {pct(xs, 50):6.1f} / {pct(xs, 95):6.1f} / "
                  f"{pct(xs, 99):6.1f}")
        ratio = pct(results["PostgreSQL"][name], 50) / pct(results["SQLite"][name], 50)
        print(f"  {name:<22} PostgreSQL / SQLite (p50): {ratio:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=500)
    parser.add_argument("--db", metavar="URL", help="a PostgreSQL database to time (empty)")
    args = parser.parse_args()
    database_section(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
