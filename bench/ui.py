"""UI benchmark: the workstation's handlers on 1,000 and 160,000 studies, server side, with
p50/p95/p99; a JPEG 2000 study's first open; optionally the same through HTTP.

Timed are the functions the Gradio events call, not a service below them:
- open next study: the panel's next-unfinished target + `Desk.open` + the gallery's preview files
  (`StudyViewer.preview_file`, served from disk once written: every synthetic study points at
  the same radiograph, so this is the "preview already on disk" case; the first open of a study
  is timed separately on real JPEG 2000 files);
- save: `Desk.save` (one revision, its own transaction); rate: `Desk.rate`;
- worklist page (a random page, with the progress line), search (a study-key prefix), and
  next-unfinished: `WorklistPanelLogic.view` / `.target`.
The metrics panel is not part of open or save (it is computed in a follow-up event).

The 160,000-study database is built with bulk INSERTs (bench/synthetic.py: metadata, a reference
report and one image row per study). Targets on a 2-core machine: open p95 < 50 ms and save p99
< 20 ms at 160,000 studies, not more than 2x the 1,000-study figures; a 2-image JPEG 2000 study
opened for the first time < 300 ms.

With `--http N` it also starts the app (launch.py) on the 1,000-study database and times N
"next study" and "save" calls with gradio_client, next to the floor of a Gradio app whose
endpoint does nothing.
Run: `.venv/bin/python bench/ui.py [--sizes 1000,160000] [--rounds 300] [--http 200]`.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000, q))


def line(name: str, xs: list[float]) -> str:
    return (f"  {name:<28} p50 {pct(xs, 50):7.1f} ms  p95 {pct(xs, 95):7.1f} ms  "
            f"p99 {pct(xs, 99):7.1f} ms  (n={len(xs)})")


def timed(xs: list[float], fn, *args, **kwargs):
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    xs.append(time.perf_counter() - t)
    return out


class SizeBench:
    """One database of `n` studies and the handlers on it; `round()` times one of each."""

    def __init__(self, folder: Path, n: int, seed: int = 0) -> None:
        from pydicom.data import get_testdata_file

        from app.services.drafting import DraftingService
        from app.services.review import ReviewService
        from app.services.viewer import DecodedCache, StudyViewer
        from app.services.worklist import WorklistService
        from app.settings import Settings
        from app.ui.desk import Desk, Session
        from app.ui.worklist_panel import WorklistPanelLogic
        from bench.synthetic import SyntheticImage, add_studies
        from db.engine import open_database

        self.n = n
        settings = Settings.from_args(str(folder / f"bench-{n}.sqlite"))
        self.db = open_database(settings.db_url)
        t0 = time.perf_counter()
        add_studies(self.db, n, studies_per_patient=2,
                    image=SyntheticImage(get_testdata_file("RG1_UNCI.dcm"), 1955, 1841))
        built = time.perf_counter() - t0
        review = ReviewService(self.db)
        self.reader = review.local_reader()
        t0 = time.perf_counter()
        review.assign(self.reader)
        assigned = time.perf_counter() - t0
        print(f"{n:,} studies: built in {built:.1f} s (bulk INSERT), assigned to a reader in "
              f"{assigned:.2f} s (INSERT ... SELECT)")
        self.viewer = StudyViewer(self.db, settings.blobs, DecodedCache(max_bytes=256 << 20),
                                  preview_dir=settings.data_dir / "previews")
        self.desk = Desk(self.viewer, review,
                         DraftingService(self.db, settings, decoded=self.viewer.decoded))
        self.panel = WorklistPanelLogic(WorklistService(self.db))
        self.session = Session()
        first = self.viewer.open(self.panel.target(self.reader, None, 1))
        [self.viewer.preview_file(img) for img in first.images]  # the shared preview, on disk
        self.rng = random.Random(seed)
        self.current: int | None = None
        self.times: dict[str, list[float]] = {k: [] for k in (
            "open next study", "save", "rate", "worklist page", "search", "next unfinished")}

    def round(self, i: int) -> None:
        times, panel, desk, reader = self.times, self.panel, self.desk, self.reader
        t = time.perf_counter()
        target = panel.target(reader, self.current, 1)
        opened = desk.open(self.session, reader, target, time.monotonic())
        [self.viewer.preview_file(img) for img in opened.view.images]
        times["open next study"].append(time.perf_counter() - t)
        self.current = target
        timed(times["save"], desk.save, self.session, f"Edited findings {i}.",
              "No acute disease.")
        timed(times["rate"], desk.rate, self.session, 4, False, {}, None)
        pages = max(1, self.n // panel.page_size)
        timed(times["worklist page"], panel.view, reader, page=self.rng.randint(1, pages))
        timed(times["search"], panel.view, reader, search=f"CXR{self.rng.randint(1, self.n)}")
        timed(times["next unfinished"], panel.target, reader, self.current, 1)


def bench_first_open(folder: Path, sides: tuple[int, ...] = (1024, 512),
                     repeats: int = 5) -> dict[int, list[float]]:
    """A 2-image JPEG 2000 study (RG1_J2KR + RG1_J2KI), opened with nothing cached or on disk,
    for gallery previews of at most `side` pixels (1955 px films: 1024 decodes at 1/2, 512 at
    1/4 resolution)."""
    from pydicom.data import get_testdata_file

    from app.services.ingest import import_records
    from app.services.review import ReviewService
    from app.services.viewer import StudyViewer
    from app.settings import Settings
    from app.ui.desk import Desk, Session
    from db.engine import open_database
    from studies.records import ImageSource, ReportSections, StudyRecord

    settings = Settings.from_args(str(folder / "j2k.sqlite"))
    db = open_database(settings.db_url)
    images = folder / "j2k"
    images.mkdir()
    paths = [str(shutil.copy(get_testdata_file(name), images / name))
             for name in ("RG1_J2KR.dcm", "RG1_J2KI.dcm")]
    record = StudyRecord(source="bench", study_key="J2K1", patient_key="P", origin="bench",
                         study_date=date(2024, 1, 1),
                         images=tuple(ImageSource(name=p, path=p) for p in paths),
                         reference=ReportSections("Clear.", "Normal."))
    import_records(db, [record], blobs=settings.blobs, fmt="bench")
    review = ReviewService(db)
    reader = review.local_reader()
    review.assign(reader)
    out: dict[int, list[float]] = {side: [] for side in sides}
    for i in range(repeats):
        for side in sides:
            viewer = StudyViewer(db, settings.blobs, preview_dir=folder / f"previews-{side}-{i}")
            desk = Desk(viewer, review)
            t = time.perf_counter()
            opened = desk.open(Session(), reader, 1, time.monotonic())
            [viewer.preview_file(img, side) for img in opened.view.images]
            out[side].append(time.perf_counter() - t)
    db.dispose()
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(url: str) -> None:
    import urllib.request

    for _ in range(240):
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not come up")


NOOP_APP = """
import sys
import gradio as gr
with gr.Blocks() as ui:
    state = gr.State({})
    out = gr.Markdown()
    gr.Button("noop").click(lambda s: "", [state], [out], api_name="noop")
ui.launch(server_port=int(sys.argv[1]))
"""


def bench_http(db: Path, n: int) -> dict[str, list[float]]:
    """The app's own API with gradio_client, and a no-op Gradio endpoint as the floor."""
    from gradio_client import Client

    port, noop_port = _free_port(), _free_port()
    app = subprocess.Popen([sys.executable, "launch.py", "--db", str(db), "--port", str(port),
                            "--no-demo", "--no-predraft"], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    noop = subprocess.Popen([sys.executable, "-c", NOOP_APP, str(noop_port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(f"http://127.0.0.1:{port}/")
        _wait(f"http://127.0.0.1:{noop_port}/")
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        floor_client = Client(f"http://127.0.0.1:{noop_port}/", verbose=False)
        client.predict("all", "all", api_name="/next_study")  # warm-up
        floor_client.predict(api_name="/noop")
        times: dict[str, list[float]] = {"HTTP no-op floor": [], "HTTP next study": [],
                                         "HTTP save": []}
        for i in range(n):
            timed(times["HTTP no-op floor"], floor_client.predict, api_name="/noop")
            timed(times["HTTP next study"], client.predict, "all", "all",
                  api_name="/next_study")
            timed(times["HTTP save"], client.predict, f"HTTP edit {i}.", "Impression.", "all",
                  "all", api_name="/save")
        return times
    finally:
        for proc in (app, noop):
            proc.terminate()
            proc.wait(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,160000",
                        help="worklist sizes to time (comma-separated)")
    parser.add_argument("--rounds", type=int, default=300,
                        help="open/save/rate rounds per size")
    parser.add_argument("--http", type=int, default=0, metavar="N",
                        help="also time N calls through the running app (gradio_client)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]

    results: dict[int, dict[str, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        benches = [SizeBench(folder, n) for n in sizes]
        for i in range(args.rounds):  # sizes take turns, so both see the same machine load
            for bench in benches:
                bench.round(i)
        for bench in benches:
            results[bench.n] = bench.times
            bench.db.dispose()
        first = bench_first_open(folder)
        http = bench_http(folder / f"bench-{sizes[0]}.sqlite", args.http) if args.http else None

    for n, times in results.items():
        print(f"{n:,} studies (server side, the handlers Gradio calls):")
        for name, xs in times.items():
            print(line(name, xs))
    print("2-image JPEG 2000 study, first open (nothing cached, no preview on disk):")
    for side, xs in first.items():
        print(line(f"first open, previews <= {side} px", xs))
    if http:
        print(f"through HTTP on {sizes[0]:,} studies (gradio_client, {args.http} calls):")
        for name, xs in http.items():
            print(line(name, xs))
    big, small = max(results), min(results)
    open_p95, save_p99 = pct(results[big]["open next study"], 95), pct(results[big]["save"], 99)
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"targets at {big:,}: open p95 < 50 ms ({open_p95:.1f}), save p99 < 20 ms "
          f"({save_p99:.1f}); vs {small:,}: open p95 x"
          f"{open_p95 / pct(results[small]['open next study'], 95):.2f}, save p99 x"
          f"{save_p99 / pct(results[small]['save'], 99):.2f} (target <= 2); "
          f"JPEG 2000 first open p50 {pct(first[1024], 50):.0f} ms at 1024 px, "
          f"{pct(first[512], 50):.0f} ms at 512 px (target < 300)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
