"""UI benchmark: opening the next study (server side, images decoded and ready) and saving an
edit, p50/p95/p99 over 1,000 imported studies, next to a bare pydicom decode of the same image.

The timed calls are the services the Gradio handlers call, in the same order (open: study with
decoded images and previews, drafts, the reader's revisions and rating, the metrics panel; save:
one revision in its own transaction). Each study has its own image row, so every open decodes
(the viewer's cache is keyed by image). Targets: open p95 < 300 ms, save p99 < 50 ms.
With `--http N` it also starts the app and times N "next study" and "save" calls end to end
through the app's own API with gradio_client (HTTP, queue, and image transfer included).
Run: `.venv/bin/python bench/ui.py [--studies 1000] [--image RG1_UNCI.dcm] [--http 200]`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000, q))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=1000)
    parser.add_argument("--image", default="RG1_UNCI.dcm", help="pydicom-data test file")
    parser.add_argument("--http", type=int, default=0, metavar="N",
                        help="also time N calls through the running app (gradio_client)")
    args = parser.parse_args()

    import pydicom
    from pydicom.data import get_testdata_file

    from app.services.drafting import DraftingService
    from app.services.evaluation import StudyMetrics
    from app.services.ingest import import_records
    from app.services.review import ReviewService
    from app.services.viewer import DecodedCache, StudyViewer
    from app.settings import Settings
    from db.engine import open_database
    from metrics.registry import MetricConfig
    from studies.records import ImageSource, ReportSections, StudyRecord

    path = get_testdata_file(args.image)
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_args(str(Path(tmp) / "bench.sqlite"))
        db = open_database(settings.db_url)
        records = (StudyRecord(
            source="bench", study_key=f"S{i:05d}", patient_key=f"P{i // 2:05d}", origin="bench",
            study_date=date(2024, 1, 1) + timedelta(days=i), indication="Cough.",
            images=(ImageSource(name=path, path=path, view_position="PA"),),
            reference=ReportSections(f"Finding {i}: the lungs are clear.", "Normal."))
            for i in range(args.studies))
        t0 = time.perf_counter()
        report = import_records(db, records, blobs=settings.blobs, fmt="bench")
        print(f"imported {report.added} studies in {time.perf_counter() - t0:.1f} s")

        viewer = StudyViewer(db, settings.blobs, DecodedCache(max_bytes=256 << 20))
        drafting = DraftingService(db, settings, decoded=viewer.decoded)
        review = ReviewService(db)
        panel = StudyMetrics(db, config=MetricConfig(download=False))
        reader = review.local_reader()
        review.assign(reader)
        ids = [w.study_id for w in review.worklist(reader)]

        bare, opens, saves = [], [], []
        for study_id in ids:
            t = time.perf_counter()
            _ = pydicom.dcmread(path).pixel_array
            bare.append(time.perf_counter() - t)

            t = time.perf_counter()
            view = viewer.open(study_id)
            [img.preview() for img in view.images]
            drafting.latest(study_id, "retrieval")
            review.current(reader, study_id)
            review.latest_rating(reader, study_id)
            panel.panel({"findings": {"draft": None, "final": None,
                                      "reference": view.reference.findings}})
            opens.append(time.perf_counter() - t)

            t = time.perf_counter()
            review.save(reader, study_id, "findings", f"Edited {study_id}.", None)
            saves.append(time.perf_counter() - t)

        http = _http(Path(tmp) / "bench.sqlite", args.http) if args.http else None

    print(f"{len(ids)} studies, image {args.image} "
          f"({pydicom.dcmread(path).Rows}x{pydicom.dcmread(path).Columns})")
    for name, xs in (("bare pydicom decode", bare), ("open next study", opens),
                     ("save an edit", saves)):
        print(f"  {name:<20} p50 {pct(xs, 50):7.1f} ms  p95 {pct(xs, 95):7.1f} ms  "
              f"p99 {pct(xs, 99):7.1f} ms")
    if http:
        for name, xs in (("HTTP next study", http[0]), ("HTTP save", http[1]),
                         ("HTTP worklist only", http[2])):
            print(f"  {name:<20} p50 {pct(xs, 50):7.1f} ms  p95 {pct(xs, 95):7.1f} ms  "
                  f"p99 {pct(xs, 99):7.1f} ms")
    print(f"open / bare decode (medians): {statistics.median(opens) / statistics.median(bare):.2f}x"
          f"  · targets: open p95 < 300 ms ({pct(opens, 95):.0f}), "
          f"save p99 < 50 ms ({pct(saves, 99):.0f})")
    return 0


def _http(db: Path, n: int) -> tuple[list[float], list[float], list[float]]:
    """Start the app on the bench database and time its own API with gradio_client."""
    import socket
    import subprocess
    import urllib.request

    from gradio_client import Client

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "launch.py", "--db", str(db), "--port", str(port),
                             "--no-demo", "--no-predraft"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(url, timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        client = Client(url, verbose=False)
        client.predict("all", "all", api_name="/next_study")  # warm-up
        opens, saves, floor = [], [], []
        for i in range(n):
            t = time.perf_counter()
            client.predict("all", "all", api_name="/on_filter")  # the framework's floor
            floor.append(time.perf_counter() - t)
            t = time.perf_counter()
            client.predict("all", "all", api_name="/next_study")
            opens.append(time.perf_counter() - t)
            t = time.perf_counter()
            client.predict(f"HTTP edit {i}.", "Impression.", "all", "all", api_name="/save")
            saves.append(time.perf_counter() - t)
        return opens, saves, floor
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
