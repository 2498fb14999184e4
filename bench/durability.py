"""Durability cost: the time of one saved edit (ReviewService.save, one revision, one audit row,
one transaction) with `synchronous=FULL` (what the app uses: an acknowledged save survives an OS
crash or power cut) next to `synchronous=NORMAL` (WAL's default: survives an application crash
only), on the same database file in the same process. Prints p50/p99 of each and the ratio.

Run: `.venv/bin/python -m bench.durability [--saves 400]`. The file lives in the current folder's
file system by default (`--dir`), because the cost is an fsync and /tmp may be a RAM disk.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _time_saves(review, reader: int, study: int, n: int, tag: str) -> list[float]:
    latest = review.current(reader, study).get("findings")
    base = latest.number if latest else None
    took = []
    for i in range(n):
        start = time.perf_counter()
        saved = review.save(reader, study, "findings", f"{tag} edit {i}", base)
        took.append(time.perf_counter() - start)
        base = saved.number
    return took


def measure(saves: int, folder: Path) -> dict[str, list[float]]:
    """Seconds per save under each mode ({"FULL": [...], "NORMAL": [...]}), on a scratch
    database made in `folder` (bench/ui.py calls this too)."""
    from sqlalchemy import event, text

    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.review.service import ReviewService
    from rrg_review.app.settings import Settings
    from rrg_review.app.setup import seed_demo
    from rrg_review.app.worklist.service import WorklistService

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        settings = Settings.from_args(str(Path(tmp) / "durability.sqlite"))
        db = settings.open_database()
        seed_demo(db, settings)
        review = ReviewService(db)
        reader = AccountService(review.db).local_reader()
        WorklistService(review.db).assign(reader)
        study = WorklistService(review.db).items(reader)[0].study_id
        _time_saves(review, reader, study, 20, "warm-up")
        results = {}
        for mode in ("FULL", "NORMAL", "FULL"):  # FULL twice: the first run also warms up
            db.engine.dispose()

            @event.listens_for(db.engine, "connect")
            def _mode(dbapi_connection, _record, mode=mode) -> None:
                dbapi_connection.execute(f"PRAGMA synchronous={mode}")

            with db.engine.connect() as conn:
                got = conn.execute(text("PRAGMA synchronous")).scalar()
            assert got == {"FULL": 2, "NORMAL": 1}[mode], got
            results[mode] = _time_saves(review, reader, study, saves, mode)
            event.remove(db.engine, "connect", _mode)
        db.dispose()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=400)
    parser.add_argument("--dir", default=".", help="folder for the scratch database")
    args = parser.parse_args()
    Path(args.dir).mkdir(parents=True, exist_ok=True)  # (a new folder: made, not a traceback)
    results = measure(args.saves, Path(args.dir))

    def pct(values: list[float], q: float) -> float:
        return float(np.percentile(np.array(values) * 1000, q))

    for mode in ("NORMAL", "FULL"):
        v = results[mode]
        print(f"save with synchronous={mode:<6}: p50 {pct(v, 50):6.2f} ms  p99 {pct(v, 99):6.2f} ms"
              f"  ({len(v)} saves)")
    ratio = pct(results["FULL"], 50) / max(pct(results["NORMAL"], 50), 1e-9)
    print(f"FULL / NORMAL (p50): {ratio:.2f}x  -- the price of a save that survives a power cut")
    return 0


if __name__ == "__main__":
    sys.exit(main())
