"""Ingest benchmark: each figure next to a baseline measured in the same run.

1. 100,000 metadata-only ReXGradient-style studies (`train_metadata.json`, one row per study):
   `rrg-review import` vs bare `json.load` + one `executemany` of the same rows into SQLite.
   Target: < 60 s on the 2-core machine.
2. Re-import of the unchanged dataset. Target: >= 5,000 studies/s.
3. ReXGradient-sized 16-bit PNGs (760 x 640): images/s of the import (every image read through
   the Guard, decoded by the display pipeline, checksummed, stored) vs bare PIL decode of the
   same files, both on all cores. Target: >= 0.8x of bare decode.
4. DICOM decode-to-display vs bare pydicom decode (target <= 2x), as before.

Run: `.venv/bin/python bench/ingest.py [--studies N] [--images N] [--repeat N]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_FINDINGS = ("The lungs are clear. No pleural effusion or pneumothorax. Heart size is normal.",
             "Mild cardiomegaly. Small left pleural effusion with basilar atelectasis.",
             float("nan"))


def metadata_rows(n: int) -> list[dict]:
    rng = random.Random(0)
    rows = []
    for i in range(n):
        rows.append({
            "PatientID": f"GRDN{i // 3:07d}", "AccessionNumber": f"GRDNA{i:08d}",
            "StudyInstanceUid": f"1.2.840.{i}", "StudyDate": 20130101 + (i % 28),
            "PatientSex": rng.choice("MF"), "PatientAge": f"{rng.randint(18, 95):03d}Y",
            "Indication": "Shortness of breath.", "Comparison": float("nan"),
            "Findings": rng.choice(_FINDINGS), "Impression": "No acute cardiopulmonary process.",
        })
    return rows


def bare_metadata_baseline(path: Path, db_path: Path) -> float:
    """json.load + executemany of the same values into a table of the same columns."""
    t0 = time.perf_counter()
    with open(path) as fh:
        rows = json.load(fh)
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE s (patient TEXT, acc TEXT UNIQUE, date TEXT, sex TEXT, age TEXT,"
                 " indication TEXT, comparison TEXT, findings TEXT, impression TEXT)")
    with conn:
        conn.executemany("INSERT INTO s VALUES (?,?,?,?,?,?,?,?,?)", [
            (r["PatientID"], r["AccessionNumber"], str(r["StudyDate"]), r["PatientSex"],
             r["PatientAge"], r["Indication"], None, r["Findings"] if r["Findings"] == r[
                 "Findings"] else None, r["Impression"]) for r in rows])
    conn.close()
    return time.perf_counter() - t0


def bench_metadata(n: int) -> None:
    from app.services.ingest import import_path
    from app.settings import Settings
    from db.engine import open_database

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ReXGradient-160K"
        (root / "metadata").mkdir(parents=True)
        meta = root / "metadata" / "train_metadata.json"
        meta.write_text(json.dumps(metadata_rows(n)))
        bare = bare_metadata_baseline(meta, Path(tmp) / "bare.sqlite")
        settings = Settings.from_args(str(Path(tmp) / "bench.sqlite"))
        db = open_database(settings.db_url)
        t0 = time.perf_counter()
        report = import_path(db, root, blobs=settings.blobs)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = import_path(db, root, blobs=settings.blobs)
        second = time.perf_counter() - t0
        db.dispose()
    assert report.added == n and again.unchanged == n, (report.summary(), again.summary())
    print(f"metadata-only import: {n:,} studies in {first:.1f} s = {n / first:,.0f} studies/s "
          f"(target < 60 s); baseline json.load + executemany {bare:.1f} s = "
          f"{n / bare:,.0f} rows/s")
    print(f"unchanged re-import: {n:,} studies in {second:.1f} s = {n / second:,.0f} studies/s "
          f"(target >= 5,000/s)")


def _bare_decode(path: str) -> int:
    from PIL import Image

    with Image.open(path) as im:
        im.load()
        return im.width


def bench_images(n: int, workers: int, rounds: int = 3) -> None:
    import numpy as np
    from PIL import Image

    from app.services.ingest import import_path
    from app.settings import Settings
    from db.engine import open_database

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "rex"
        rows = {}
        yy, xx = np.mgrid[0:640, 0:760]
        base = (np.sin(xx / 40.0) * np.cos(yy / 55.0) * 12000 + 30000).astype(np.int32)
        paths = []
        for i in range(n // 2):
            rels = []
            for j in range(2):
                noise = rng.integers(0, 2000, size=base.shape, dtype=np.int32)
                arr = np.clip(base + noise, 0, 65535).astype(np.uint16)
                rel = f"deid_png/P{i}/A{i}/studies/1.{i}/series/1.{i}.{j}/instances/1.{i}.{j}.1.png"
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(root / rel, format="PNG")
                rels.append("../" + rel)
                paths.append(str(root / rel))
            rows[f"pP{i}_aA{i}_s1.{i}"] = {
                "PatientID": f"P{i}", "AccessionNumber": f"A{i}", "StudyDate": 20200101,
                "Findings": "Clear.", "Impression": "Normal.", "ImagePath": rels,
                "ImageViewPosition": ["PA", "LATERAL"]}
        (root / "metadata").mkdir(parents=True)
        (root / "metadata" / "train_metadata_view_position.json").write_text(json.dumps(rows))
        size = os.path.getsize(paths[0])
        bare_times, our_times = [], []
        with ProcessPoolExecutor(workers) as pool:  # warm the workers
            list(pool.map(_bare_decode, paths[:workers * 2]))
            for round_no in range(rounds):  # alternate, so load from elsewhere hits both
                t0 = time.perf_counter()
                list(pool.map(_bare_decode, paths, chunksize=4))
                bare_times.append(time.perf_counter() - t0)
                settings = Settings.from_args(str(Path(tmp) / f"bench{round_no}.sqlite"))
                db = open_database(settings.db_url)
                t0 = time.perf_counter()
                report = import_path(db, root, blobs=settings.blobs, workers=workers)
                our_times.append(time.perf_counter() - t0)
                db.dispose()
            # the per-image check alone (no pool start, metadata or writes), same warm pool
            from app.services.ingest import _check_one
            from studies.pixels import ImageCheck
            from studies.records import ImageSource
            from studies.safety import Guard

            check = ImageCheck(guard=Guard.for_roots(root))
            tasks = [(ImageSource(name=p, path=p), check) for p in paths]
            warm_bare, warm_check = [], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                list(pool.map(_bare_decode, paths, chunksize=2))
                warm_bare.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                list(pool.map(_check_one, tasks, chunksize=2))
                warm_check.append(time.perf_counter() - t0)
        bare, ours = statistics.median(bare_times), statistics.median(our_times)
        wb, wc = statistics.median(warm_bare), statistics.median(warm_check)
    assert report.images == len(paths), report.summary()
    print(f"16-bit PNG 760x640 ({size / 1024:.0f} KiB each), {len(paths)} images, {workers} "
          f"processes, median of {rounds} alternating rounds: import "
          f"{len(paths) / ours:,.1f} images/s; baseline bare PIL decode "
          f"{len(paths) / bare:,.1f} images/s; ratio {bare / ours:.2f}x (target >= 0.8x)")
    print(f"  the image check alone in the same warm pool: {len(paths) / wc:,.1f} images/s vs "
          f"bare decode {len(paths) / wb:,.1f} images/s; ratio {wb / wc:.2f}x")
    print(f"  load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def paired_medians(a, b, repeat: int) -> tuple[float, float]:
    """Median seconds of a and b, measured alternately after warm-ups, so drift hits both."""
    for _ in range(2):
        a(), b()
    ta, tb = [], []
    for _ in range(repeat):
        for fn, samples in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def bench_decode(repeat: int) -> None:
    import pydicom
    from pydicom.data import get_testdata_file

    from studies.pixels import decode
    from studies.records import ImageSource

    print("DICOM decode-to-display vs bare pydicom.dcmread(...).pixel_array (median of runs)")
    for name in ("RG1_UNCR.dcm", "RG1_UNCI.dcm", "RG1_J2KR.dcm"):
        path = get_testdata_file(name)
        source = ImageSource(name=name, path=path)
        n = repeat if "UNC" in name else max(3, repeat // 10)
        bare, ours = paired_medians(lambda p=path: pydicom.dcmread(p).pixel_array,
                                    lambda s=source: decode(s), n)
        print(f"  {name:14s} bare {bare * 1e3:8.1f} ms   display {ours * 1e3:8.1f} ms   "
              f"ratio {ours / bare:5.2f}x  (target <= 2x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--studies", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=400)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--only", choices=("metadata", "images", "decode"))
    args = parser.parse_args()
    if args.only in (None, "metadata"):
        bench_metadata(args.studies)
    if args.only in (None, "images"):
        bench_images(args.images, args.workers)
    if args.only in (None, "decode"):
        bench_decode(args.repeat)


if __name__ == "__main__":
    main()
