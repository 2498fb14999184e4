"""Ingest benchmark: each figure next to a baseline measured in the same run.

1. 100,000 metadata-only ReXGradient-style studies (`train_metadata.json`, one row per study):
   `rrg-review import` vs bare `json.load` + one `executemany` of the same rows into SQLite.
   Target: < 60 s on the 2-core machine.
2. Re-import of the unchanged dataset. Target: >= 5,000 studies/s.
3. ReXGradient-sized 16-bit PNGs (760 x 640): images/s of the import (every image read through
   the Guard, decoded by the display pipeline, checksummed, stored) vs bare PIL decode of the
   same files, both on all cores. Target: >= 0.8x of bare decode.
   Also CPU per image of all processes, and a per-stage profile of the check in one process.
4. The DICOM header scan of a PACS export (a few thousand small files grouped by
   StudyInstanceUID), in one process and on all cores, vs bare `dcmread(stop_before_pixels)`.
5. DICOM decode-to-display vs bare pydicom decode (target <= 2x), as before.

Run: `.venv/bin/python -m bench.ingest [--studies N] [--images N] [--dicom-files N]
[--repeat N] [--only metadata|images|dicom-scan|decode]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

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
    from rrg_review.app.ingest.service import import_path
    from rrg_review.app.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ReXGradient-160K"
        (root / "metadata").mkdir(parents=True)
        meta = root / "metadata" / "train_metadata.json"
        meta.write_text(json.dumps(metadata_rows(n)))
        bare = bare_metadata_baseline(meta, Path(tmp) / "bare.sqlite")
        settings = Settings.from_args(str(Path(tmp) / "bench.sqlite"))
        db = settings.open_database()
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


def _cpu_now() -> float:
    """CPU seconds of this process plus its reaped children (the pools' workers)."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _bare_round(paths: list[str], workers: int) -> None:
    """Bare decode of the same files with the same number of processes, pool started in the
    round as the import starts its own (chunks of 4, as the import sends)."""
    import PIL.Image  # noqa: F401  (as the import does before forking)

    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_bare_decode, paths, chunksize=4))


def write_pngs(root: Path, n: int) -> tuple[list[str], dict]:
    """n ReXGradient-sized 16-bit PNGs (760 x 640, two per study) and their metadata rows."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    rows: dict = {}
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
    return paths, rows


def bench_images(n: int, workers: int, rounds: int = 3) -> None:
    from rrg_review.app.ingest.service import import_path
    from rrg_review.app.settings import Settings

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "rex"
        paths, rows = write_pngs(root, n)
        (root / "metadata").mkdir(parents=True)
        (root / "metadata" / "train_metadata_view_position.json").write_text(json.dumps(rows))
        size = os.path.getsize(paths[0])
        _bare_round(paths[:workers * 4], workers)  # page cache and imports warm for both
        bare_wall, bare_cpu, our_wall, our_cpu = [], [], [], []
        for round_no in range(rounds):  # alternate, so load from elsewhere hits both
            c0, t0 = _cpu_now(), time.perf_counter()
            _bare_round(paths, workers)
            bare_wall.append(time.perf_counter() - t0)
            bare_cpu.append(_cpu_now() - c0)
            settings = Settings.from_args(str(Path(tmp) / f"bench{round_no}.sqlite"))
            db = settings.open_database()
            c0, t0 = _cpu_now(), time.perf_counter()
            report = import_path(db, root, blobs=settings.blobs, workers=workers)
            our_wall.append(time.perf_counter() - t0)
            our_cpu.append(_cpu_now() - c0)
            db.dispose()
            assert report.images == len(paths), report.summary()
        profile = stage_profile(paths[:40], root)
    bare, ours = statistics.median(bare_wall), statistics.median(our_wall)
    cb, co = statistics.median(bare_cpu), statistics.median(our_cpu)
    k = len(paths)
    print(f"16-bit PNG 760x640 ({size / 1024:.0f} KiB each), {k} images, {workers} processes, "
          f"median of {rounds} alternating rounds: import {k / ours:,.1f} images/s; baseline "
          f"bare PIL decode {k / bare:,.1f} images/s; ratio {bare / ours:.2f}x "
          f"(target >= 0.8x)")
    print(f"  CPU per image (all processes): import {co / k * 1e3:.2f} ms, bare decode "
          f"{cb / k * 1e3:.2f} ms; ratio {cb / co:.2f}x")
    print(f"  per stage, one process, {profile}")
    print(f"  load average: {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on "
          f"{os.cpu_count()} cores")


def stage_profile(paths: list[str], root: Path) -> str:
    """Median CPU ms per image of each stage of the import's check, and of the bare decode."""
    import hashlib
    import io

    import numpy as np
    from PIL import Image

    from rrg_review.studies.pixels import ImageCheck, _minmax_u8_int, inspect_file
    from rrg_review.studies.records import ImageSource
    from rrg_review.studies.safety import Guard

    check = ImageCheck(guard=Guard.for_roots(root))
    guard = check.guard
    assert guard is not None
    datas = [guard.read(p) for p in paths]
    images = []
    for d in datas:
        im = Image.open(io.BytesIO(d))
        im.load()
        images.append(im)
    arrays = [np.asarray(im) for im in images]

    def decode_bytes() -> None:
        for d in datas:
            with Image.open(io.BytesIO(d)) as im:
                im.load()

    stages = {
        "bare decode": lambda: [_bare_decode(p) for p in paths],
        "whole check": lambda: [inspect_file(ImageSource(name=p, path=p), check) for p in paths],
        "Guard read": lambda: [guard.read(p) for p in paths],
        "sha256": lambda: [hashlib.sha256(d).hexdigest() for d in datas],
        "decode from bytes": decode_bytes,
        # the copy out of Pillow that the import no longer makes for 16-bit PNGs (it decodes
        # into the array): shown for comparison
        "to array": lambda: [np.asarray(im) for im in images],
        "min-max": lambda: [_minmax_u8_int(a) for a in arrays],
    }
    samples: dict[str, list[float]] = {name: [] for name in stages}
    for _ in range(5):
        for name, fn in stages.items():
            t0 = time.process_time()
            fn()
            samples[name].append(time.process_time() - t0)
    return ", ".join(f"{name} {statistics.median(v) / len(paths) * 1e3:.2f} ms"
                     for name, v in samples.items())


def write_pacs_export(root: Path, n: int) -> None:
    """n small DICOM files as a PACS/CD export: no extensions, series sub-folders, 4 images per
    study, 50 patients' folders (a real RG1 header, 32 x 32 pixels so the header dominates)."""
    import numpy as np
    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.uid import ExplicitVRLittleEndian

    ds = pydicom.dcmread(get_testdata_file("RG1_UNCR.dcm"))
    ds.Rows, ds.Columns = 32, 32
    ds.PixelData = np.zeros((32, 32), np.uint16).tobytes()
    ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    for i in range(n):
        study = i // 4
        ds.StudyInstanceUID = f"1.2.826.0.1.3680043.8.498.{study}"
        ds.SeriesNumber, ds.InstanceNumber = i % 4 // 2 + 1, i % 2 + 1
        ds.SOPInstanceUID = f"1.2.826.0.1.3680043.8.498.{study}.{i}"
        path = root / f"P{study % 50:03d}" / f"SER{i % 4 // 2 + 1:03d}" / f"IM{i:06d}"
        path.parent.mkdir(parents=True, exist_ok=True)
        ds.save_as(path, enforce_file_format=True)


def bench_dicom_scan(n: int, workers: int, rounds: int = 3) -> None:
    """Grouping a PACS export by StudyInstanceUID: the header scan, serial and on all cores,
    next to bare `dcmread(stop_before_pixels=True)` of the same files in one process."""
    import pydicom

    from rrg_review.studies.importers.folder import _group_dicom, scan
    from rrg_review.studies.safety import Guard

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "EXPORT"
        write_pacs_export(root, n)
        guard = Guard.for_roots(root)
        t0 = time.perf_counter()
        files = scan(root, follow_symlinks=False).dicom
        walk = time.perf_counter() - t0
        bare_t, serial_t, pool_t = [], [], []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for f in files:
                pydicom.dcmread(f, stop_before_pixels=True)
            bare_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            studies = _group_dicom(files, guard, 1)[0]
            serial_t.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            parallel = _group_dicom(files, guard, workers)[0]
            pool_t.append(time.perf_counter() - t0)
    assert len(files) == n and len(studies) == len(parallel) == n // 4, (len(files), len(studies))
    bare, serial, pooled = (statistics.median(t) for t in (bare_t, serial_t, pool_t))
    print(f"DICOM header scan, {n:,} files of a PACS export ({n // 4:,} studies), median of "
          f"{rounds}: walk + sniff {walk:.2f} s; grouped by StudyInstanceUID in 1 process "
          f"{n / serial:,.0f} files/s, in {workers} processes {n / pooled:,.0f} files/s; "
          f"baseline bare dcmread(stop_before_pixels) in 1 process {n / bare:,.0f} files/s")
    print(f"  load average: {load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on "
          f"{os.cpu_count()} cores")


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

    from rrg_review.studies.pixels import decode
    from rrg_review.studies.records import ImageSource

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
    parser.add_argument("--dicom-files", type=int, default=3000)
    parser.add_argument("--only", choices=("metadata", "images", "dicom-scan", "decode"))
    args = parser.parse_args()
    if args.only in (None, "metadata"):
        bench_metadata(args.studies)
    if args.only in (None, "images"):
        bench_images(args.images, args.workers)
    if args.only in (None, "dicom-scan"):
        bench_dicom_scan(args.dicom_files, args.workers)
    if args.only in (None, "decode"):
        bench_decode(args.repeat)


if __name__ == "__main__":
    main()
