"""Readings at the issue's size (#20) on SQLite: a 20-reader x 500-case x 2-session crossover
(20,000 readings); one reader opens, beats, saves and signs (preview + confirmed sign) 100
readings (latency of each step), then every other reading is marked read and signed with a
revision and an active time, and the long-format table is built from the database and analysed
(`study analyze NAME`'s path without the process start).

Run: `.venv/bin/python -m bench.reading_desk [--readers 20] [--cases 500] [--steps 100]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bench.study_create import T0, _seed


def _steps(desk: object, reader: str, items: list[object]) -> dict[str, list[float]]:
    from rrg_review.app.reader_study.reading import ReadingDesk, ReadingEdit, ReadingKeys

    assert isinstance(desk, ReadingDesk)
    times: dict[str, list[float]] = {"open": [], "heartbeat": [], "save": [], "sign": []}
    for i, item in enumerate(items):
        rid = item.reading_id  # type: ignore[attr-defined]
        t = time.perf_counter()
        opened = desk.open(rid, reader, T0)
        times["open"].append(time.perf_counter() - t)
        t = time.perf_counter()
        desk.heartbeat(rid, reader, 30, at=T0.timestamp() + 100 * i, now=T0)
        times["heartbeat"].append(time.perf_counter() - t)
        keys = ReadingKeys(T0, T0 + timedelta(seconds=9), 12, 3)
        t = time.perf_counter()
        desk.save(rid, reader, {"findings": ReadingEdit(opened.sections[0].text + " Edited.",
                                                        None, keys)}, now=T0)
        times["save"].append(time.perf_counter() - t)
        t = time.perf_counter()
        desk.sign(rid, reader, desk.sign_preview(rid, reader, T0).token, T0)
        times["sign"].append(time.perf_counter() - t)
    return times


def _fill(db: object) -> None:
    """Every reading not yet opened: opened, signed, 20-199 active seconds, one revision."""
    from sqlalchemy import insert, select, text, update

    from rrg_review.db.models import Reading, Revision, table_of

    with db.write() as s:  # type: ignore[attr-defined]
        rows = list(s.execute(select(Reading.id, Reading.reader_id, Reading.study_id)
                              .where(Reading.opened_at.is_(None))))
        s.execute(update(Reading).where(Reading.opened_at.is_(None)).values(
            opened_at=T0, signed_at=T0 + timedelta(minutes=2)))
        s.execute(text("UPDATE reading SET active_seconds = 20 + (abs(random()) % 180) "
                       "WHERE active_seconds = 0"))
        s.execute(insert(table_of(Revision)), [
            {"reader_id": r[1], "study_id": r[2], "section": "findings", "number": 1000 + r[0],
             "text": "Clear lungs.", "autosave": False, "reading_id": r[0], "created_at": T0}
            for r in rows])


def main(argv: list[str] | None = None) -> int:
    from rrg_review.app.reader_study.reading import ReadingDesk
    from rrg_review.app.reader_study.service import ReaderStudyService
    from rrg_review.app.reader_study.table import readings_table
    from rrg_review.app.settings import Settings
    from rrg_review.reader_study.analysis import analyze
    from rrg_review.reader_study.design import load_design
    from rrg_review.reader_study.readings import from_columns

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=20)
    parser.add_argument("--cases", type=int, default=500)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        url = str(root / "bench.sqlite")
        readers = [f"reader{i:02d}" for i in range(args.readers)]
        _seed(url, root / "data", readers, args.cases)
        design = root / "design.json"
        design.write_text(json.dumps({
            "name": "bench", "cases": {"source": "bench"}, "readers": readers,
            "arms": ["unassisted", "reference"], "design": "crossover", "sessions": 2,
            "washout_days": 14, "seed": 1}))
        db = Settings.from_args(url, str(root / "data")).open_database()
        service = ReaderStudyService(db, [], clock=lambda: T0)
        service.create(load_design(design))
        items = list(service.worklist("bench", readers[0], T0).readings[:args.steps])
        for step, values in _steps(ReadingDesk(service), readers[0], items).items():
            values.sort()
            print(f"{step}: median {1000 * statistics.median(values):.1f} ms, "
                  f"p95 {1000 * values[int(0.95 * (len(values) - 1))]:.1f} ms")
        _fill(db)
        start = time.perf_counter()
        table = readings_table(db, "bench", unblind=True)
        built = time.perf_counter() - start
        start = time.perf_counter()
        result = analyze(from_columns(table.columns, source="study bench"))
        print(f"table of {len(table):,} readings from the database: {built:.2f} s; analysis "
              f"{time.perf_counter() - start:.2f} s ({result.n['readings']:,} analysed)")
        db.dispose()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
