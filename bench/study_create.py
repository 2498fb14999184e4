"""Reader study creation at the issue's size (#20): `study create` of a 20-reader x 500-case
x 2-session crossover (20,000 readings: validated against the database, allocated, stored in
one transaction), then the status of every reader and one reader's worklist, on SQLite and on
PostgreSQL (the server given by `--db URL`, else a throw-away local one like the tests').

Run: `.venv/bin/python -m bench.study_create [--readers 20] [--cases 500] [--sessions 2]
[--arms 2] [--db URL] [--only sqlite|postgresql]` (a quick check: `--readers 3 --cases 20`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.postgres import postgres_database

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 2, tzinfo=UTC)


def _seed(url: str, data_dir: Path, readers: list[str], cases: int) -> None:
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.settings import Settings
    from rrg_review.db.models import Patient, ReferenceReport, Study

    db = Settings.from_args(url, str(data_dir)).open_database()
    with db.write() as s:
        patient = Patient(source="bench", key="p")
        s.add(patient)
        s.flush()
        for i in range(cases):
            study = Study(patient_id=patient.id, source="bench", study_key=f"B{i:05d}",
                          split="test", image_count=1, sort_key=f"B{i:05d}")
            s.add(study)
            s.flush()
            s.add(ReferenceReport(study_id=study.id, findings="Clear.", impression="Normal."))
    accounts = AccountService(db)
    for name in readers:
        accounts.add(name, None)
    db.dispose()


def bench_backend(label: str, url: str, data_dir: Path, args: argparse.Namespace,
                  design_path: Path) -> float:
    """Seconds to create the study (and print the other timings)."""
    from rrg_review.app.reader_study.service import ReaderStudyService
    from rrg_review.app.settings import Settings
    from rrg_review.reader_study.design import load_design

    readers = [f"reader{i:02d}" for i in range(args.readers)]
    _seed(url, data_dir, readers, args.cases)
    db = Settings.from_args(url, str(data_dir)).open_database()
    service = ReaderStudyService(db, ["retrieval"], clock=lambda: T0)
    start = time.perf_counter()
    created = service.create(load_design(design_path))
    create_s = time.perf_counter() - start
    start = time.perf_counter()
    status = service.status("bench")
    status_s = time.perf_counter() - start
    start = time.perf_counter()
    worklist = service.worklist("bench", readers[0])
    worklist_s = time.perf_counter() - start
    spread = service.overview("bench").balance.spread
    print(f"{label} create: {created.readings} readings in {create_s:.2f} s; status of "
          f"{len(status.readers)} readers {status_s * 1000:.0f} ms; worklist of "
          f"{len(worklist.readings)} readings {worklist_s * 1000:.0f} ms; balance spread "
          f"{spread}")
    db.dispose()
    return create_s


def _postgresql(args: argparse.Namespace, root: Path, design_path: Path) -> float | None:
    with postgres_database(args.db, "rrg_study_create") as url:
        if url is None:
            return None
        return bench_backend("PostgreSQL", url, root / "data-pg", args, design_path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.study_create")
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=2)
    parser.add_argument("--arms", type=int, default=2, help="2: unassisted, draft:retrieval; "
                        "3: and reference")
    parser.add_argument("--db", help="a PostgreSQL URL (default: a throw-away local server)")
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    arms = ["unassisted", "draft:retrieval", "reference"][:max(2, min(args.arms, 3))]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        design_path = root / "bench.json"
        design_path.write_text(json.dumps({
            "name": "bench", "cases": {"source": "bench"},
            "readers": [f"reader{i:02d}" for i in range(args.readers)], "arms": arms,
            "design": "crossover", "sessions": args.sessions, "washout_days": 28,
            "seed": 1}))
        print(f"{args.readers} readers x {args.cases} cases x {args.sessions} sessions, "
              f"{len(arms)} arms (crossover); load average {os.getloadavg()[0]:.1f}")
        sqlite_s = pg_s = None
        if args.only in (None, "sqlite"):
            sqlite_s = bench_backend("SQLite", str(root / "bench.sqlite"), root / "data", args,
                                     design_path)
        if args.only in (None, "postgresql"):
            pg_s = _postgresql(args, root, design_path)
        if sqlite_s and pg_s:
            print(f"create PostgreSQL / SQLite: {pg_s / sqlite_s:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
