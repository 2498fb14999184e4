"""Concurrent writers: save latency with 1, 5 and 20 continuous writers on different studies.

Each writer is a process of its own (as each reader's workstation is against a team's server,
and as several app processes are against one file) that opens the database and saves edits of
one section of its own study through `ReviewService.save`, one after another with no pause,
for `--seconds`. Every writer is a different reader with a different study, so nothing they
write must be serialised: the latency should not grow with the number of writers beyond what
the machine's cores allow (before row-scoped writes, every save on PostgreSQL waited for every
other one: p50 9.6 / 51 / 235 ms at 1 / 5 / 20 writers).

Printed per database and writer count: saves, p50 / p99 / max in ms, the p50 and p99 ratio to
one writer, the saves refused (`DatabaseBusy`, SQLite only, one sentence) and two checks that
must be 0: lost saves (acknowledged but not stored as the section's next revision) and duplicate
revision numbers. PostgreSQL is the server given by `--db URL`, else a throw-away local server
started like the tests' (Debian's binaries; `fsync` off, as in the tests); SQLite is a file in a
temporary folder (synchronous=FULL, as the app runs it).

`--threads` runs the writers as threads of one process sharing one Database instead (the
workstation's request handlers; on SQLite they queue on the Database's own writer lock).

Run: `python -m bench.writers [--writers 1,5,20] [--seconds 10] [--only sqlite|postgresql]
[--threads] [--db URL]`; `--small` is the CI smoke run (1 and 2 writers, 1 s each). The
machine's load is printed with the figures: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.postgres import postgres_database

SECTION = "findings"


@dataclass(frozen=True)
class WriterResult:
    """What one writer did: its latencies (s) and the saves it was told were stored."""

    latencies: list[float]
    acknowledged: int
    refused: int
    last_text: str | None
    first_number: int | None
    last_number: int | None


@dataclass(frozen=True)
class Level:
    """One run of `writers` concurrent writers."""

    backend: str
    writers: int
    latencies: list[float]
    refused: int
    lost: int
    duplicates: int


def _settings(url: str, data_dir: Path):
    from rrg_review.app.settings import Settings

    return Settings.from_args(url, str(data_dir), key="be" * 32)


def prepare(url: str, data_dir: Path, writers: int) -> list[tuple[int, int]]:
    """`writers` readers, each with one study of their own on their worklist: (reader, study)."""
    from datetime import date

    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.ingest.service import import_records
    from rrg_review.app.worklist.service import WorklistService
    from rrg_review.db.models import Study
    from rrg_review.studies.records import ReportSections, StudyRecord

    settings = _settings(url, data_dir)
    db = settings.open_database()
    try:
        records = (StudyRecord(source="bench", study_key=f"W{i:03d}", patient_key=f"P{i:03d}",
                               origin="bench", study_date=date(2024, 1, 1),
                               reference=ReportSections(f"Finding {i}.", "Normal."))
                   for i in range(writers))
        import_records(db, records, blobs=settings.blobs, fmt="bench")
        with db.read() as s:
            studies = [sid for (sid,) in s.query(Study.id).order_by(Study.id)]
        accounts, worklists = AccountService(db), WorklistService(db, include_report_only=True)
        pairs = []
        for i, study_id in enumerate(studies[:writers]):
            reader = accounts.add(f"writer{i:02d}", None)
            worklists.assign(reader, [study_id])
            pairs.append((reader, study_id))
        return pairs
    finally:
        db.dispose()


def _writer(url: str, data_dir: str, reader: int, study: int, seconds: float,
            ready, start, results) -> None:
    """One writer process: open the database, then `_save_loop`."""
    from rrg_review.app.review.service import ReviewService

    db = _settings(url, Path(data_dir)).open_database(upgrade=False, check=False)
    try:
        _save_loop(ReviewService(db), reader, study, seconds, ready, start, results)
    finally:
        db.dispose()


def _save_loop(review, reader: int, study: int, seconds: float, ready, start,
               results) -> None:
    """Save a few times untimed, wait for the start, then save continuously for `seconds`."""
    from rrg_review.app.review.service import DatabaseBusy

    current = review.current(reader, study).get(SECTION)
    base = current.number if current else None
    first = None
    latencies: list[float] = []
    acknowledged = refused = 0
    last_text = None
    n = 0

    def save() -> bool:
        nonlocal base, n, last_text
        n += 1
        text = f"Writer {reader} edit {n}: the lungs are clear."
        try:
            revision = review.save(reader, study, SECTION, text, base)
        except DatabaseBusy:
            return False
        base, last_text = revision.number, text
        return True

    for _ in range(3):
        save()
    first = base
    ready.put(os.getpid())
    start.wait()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        ok = save()
        latencies.append(time.perf_counter() - t)
        acknowledged += ok
        refused += not ok
    results.put((reader, WriterResult(latencies, acknowledged, refused, last_text, first,
                                      base)))


def check(url: str, data_dir: Path, done: dict[int, WriterResult],
          pairs: Sequence[tuple[int, int]]) -> tuple[int, int]:
    """(lost, duplicates): acknowledged saves missing from the stored revisions, and revision
    numbers stored twice, over every writer's section."""
    from sqlalchemy import func, select

    from rrg_review.db.models import Revision

    db = _settings(url, data_dir).open_database(upgrade=False, check=False)
    lost = duplicates = 0
    try:
        with db.read() as s:
            for reader, study in pairs:
                result = done[reader]
                numbers = list(s.scalars(select(Revision.number).where(
                    Revision.reader_id == reader, Revision.study_id == study,
                    Revision.section == SECTION, Revision.number > (result.first_number or 0))
                    .order_by(Revision.number)))
                duplicates += len(numbers) - len(set(numbers))
                lost += max(0, result.acknowledged - len(set(numbers)))
                latest = s.scalar(select(Revision.text).where(
                    Revision.reader_id == reader, Revision.study_id == study,
                    Revision.section == SECTION).order_by(Revision.number.desc()).limit(1))
                if result.last_text is not None and latest != result.last_text:
                    lost += 1  # the last acknowledged text is not the current one
            duplicates += int(s.scalar(select(func.count()).select_from(
                select(Revision.reader_id).group_by(
                    Revision.reader_id, Revision.study_id, Revision.section, Revision.number)
                .having(func.count() > 1).subquery())) or 0)
    finally:
        db.dispose()
    return lost, duplicates


def run_threads(backend: str, url: str, data_dir: Path, pairs: Sequence[tuple[int, int]],
                seconds: float) -> Level:
    """All writers of `pairs` at once as threads of this process sharing one Database, as the
    workstation's handlers do; their latencies pooled."""
    import threading

    from rrg_review.app.review.service import ReviewService

    db = _settings(url, data_dir).open_database(upgrade=False, check=False)
    review = ReviewService(db)
    ready: queue.Queue = queue.Queue()
    results: queue.Queue = queue.Queue()
    start = threading.Event()
    threads = [threading.Thread(target=_save_loop, args=(review, reader, study, seconds, ready,
                                                         start, results), daemon=True)
               for reader, study in pairs]
    try:
        for t in threads:
            t.start()
        for _ in threads:
            ready.get(timeout=300)
        start.set()
        done = dict(results.get(timeout=seconds + 300) for _ in threads)
    finally:
        db.dispose()
    lost, duplicates = check(url, data_dir, done, pairs)
    return Level(backend, len(pairs), [x for r in done.values() for x in r.latencies],
                 sum(r.refused for r in done.values()), lost, duplicates)


def run_level(backend: str, url: str, data_dir: Path, pairs: Sequence[tuple[int, int]],
              seconds: float) -> Level:
    """All writers of `pairs` at once, each a process; their latencies pooled."""
    ctx = mp.get_context("spawn")  # no engine or connection crosses into a writer
    ready, results, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_writer, args=(url, str(data_dir), reader, study, seconds,
                                                ready, start, results))
             for reader, study in pairs]
    for p in procs:
        p.start()
    try:
        waiting = len(procs)
        while waiting:
            try:
                ready.get(timeout=5)
                waiting -= 1
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):
                    raise RuntimeError("a writer failed before the start (its error is "
                                       "above)") from None
        start.set()
        done = dict(results.get(timeout=seconds + 300) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    lost, duplicates = check(url, data_dir, done, pairs)
    return Level(backend, len(pairs),
                 [x for r in done.values() for x in r.latencies],
                 sum(r.refused for r in done.values()), lost, duplicates)


def ms(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000, q)) if values else float("nan")


def report(levels: Sequence[Level]) -> None:
    print(f"{'database':<11}{'writers':>8}{'saves':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
          f"{'p50 x1':>8}{'p99 x1':>8}{'refused':>9}{'lost':>6}{'dup':>5}")
    base: dict[str, Level] = {}
    for lv in levels:
        one = base.setdefault(lv.backend, lv)
        print(f"{lv.backend:<11}{lv.writers:>8}{len(lv.latencies):>8}"
              f"{ms(lv.latencies, 50):>9.1f}{ms(lv.latencies, 99):>9.1f}"
              f"{ms(lv.latencies, 100):>9.1f}"
              f"{ms(lv.latencies, 50) / ms(one.latencies, 50):>7.1f}x"
              f"{ms(lv.latencies, 99) / ms(one.latencies, 99):>7.1f}x"
              f"{lv.refused:>9}{lv.lost:>6}{lv.duplicates:>5}")


def bench_backend(backend: str, url: str, data_dir: Path, counts: Sequence[int],
                  seconds: float, threads: bool = False) -> list[Level]:
    pairs = prepare(url, data_dir, max(counts))
    levels = []
    run = run_threads if threads else run_level
    for n in counts:
        level = run(backend, url, data_dir, pairs[:n], seconds)
        print(f"  {backend} {n} writer(s): {len(level.latencies)} saves, p99 "
              f"{ms(level.latencies, 99):.1f} ms", flush=True)
        levels.append(level)
    return levels


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.writers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--writers", default="1,5,20",
                        help="comma-separated writer counts (default 1,5,20)")
    parser.add_argument("--seconds", type=float, default=10.0,
                        help="how long each count of writers saves (default 10)")
    parser.add_argument("--only", choices=("sqlite", "postgresql"))
    parser.add_argument("--db", help="a PostgreSQL URL (default: a throw-away local server)")
    parser.add_argument("--threads", action="store_true",
                        help="writers as threads of one process sharing one database (the "
                             "workstation's handlers), not processes")
    parser.add_argument("--small", action="store_true",
                        help="CI smoke run: 1 and 2 writers, 1 s each")
    args = parser.parse_args(argv)
    counts = [1, 2] if args.small else [int(x) for x in args.writers.split(",") if x.strip()]
    seconds = 1.0 if args.small else args.seconds
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; "
          f"{seconds:g} s per writer count", flush=True)
    levels: list[Level] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.only in (None, "sqlite"):
            levels += bench_backend("SQLite", str(root / "writers.sqlite"), root / "data-sq",
                                    counts, seconds, args.threads)
        if args.only in (None, "postgresql"):
            levels += _postgresql(args.db, root / "data-pg", counts, seconds, args.threads)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    report(levels)
    bad = sum(lv.lost + lv.duplicates for lv in levels)
    if bad:
        print(f"FAILED: {bad} lost or duplicate revisions", file=sys.stderr)
    return 1 if bad else 0


def _postgresql(url: str | None, data_dir: Path, counts: Sequence[int],
                seconds: float, threads: bool) -> list[Level]:
    with postgres_database(url, "rrg_writers") as database:
        if database is None:
            return []
        return bench_backend("PostgreSQL", database, data_dir, counts, seconds, threads)


if __name__ == "__main__":
    sys.exit(main())
