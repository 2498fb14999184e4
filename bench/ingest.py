"""Ingest benchmark: DICOM decode-to-display vs a bare pydicom decode; IU archive import rate.

Prints ratios against a baseline measured in the same process (target: display <= 2x bare decode).
Run: `.venv/bin/python bench/ingest.py [--repeat N]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


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


def bench_iu_import() -> None:
    from app.services.ingest import import_path
    from app.settings import Settings
    from db.engine import open_database

    archive = Path(__file__).resolve().parents[2] / "shared" / "data" / "NLMCXR_reports.tgz"
    if not archive.is_file():
        print(f"IU import: skipped ({archive} not found)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_args(str(Path(tmp) / "bench.sqlite"))
        db = open_database(settings.db_url)
        t0 = time.perf_counter()
        report = import_path(db, archive, blobs=settings.blobs)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        again = import_path(db, archive, blobs=settings.blobs)
        second = time.perf_counter() - t0
        db.dispose()
    print(f"IU X-ray archive import: {report.added} reports in {first:.1f} s = "
          f"{report.added / first:,.0f} reports/s; re-import (all present) "
          f"{again.already_present / second:,.0f} reports/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    bench_decode(args.repeat)
    bench_iu_import()


if __name__ == "__main__":
    main()
