"""UI benchmark: the workstation's event handlers on 1,000 and 160,000 studies, server side and
through HTTP against the running app, with p50/p95/p99 and ratios against the 1,000-study run.

Server side, what is timed is Gradio's own `Blocks.process_api` on the real workstation page
(`app.page.build`, as launch.py builds it): preprocessing of the inputs, the handler
(which calls the Gradio-free `Desk` and the worklist panel), postprocessing of every output; a
`SessionState` plays one browser tab. Only the HTTP round trip and Gradio's queue are missing,
and those are what the HTTP half measures:
- open next study: the "Next" button's event (`next_study`: save what is typed, the next
  unfinished study within the filters, `Desk.open`, the film with its preview files);
- save: the Save button's event (`save`: one revision in its own transaction, the page row
  and the progress line refreshed); rate: `rate` (a rating, the study done);
- worklist page: the panel's "next page" event from a random page (with the progress line);
  search: the panel's search event (a study-key prefix); search within keys: the same event
  with digits no key starts with (`WorklistService.searched`: the keys that contain them);
- next unfinished: `WorklistPanelLogic.target`, the query behind Next/Previous.
The metrics panel is a follow-up event: the benchmark counts its computations during the timed
events (it must stay 0).

Through HTTP, launch.py serves the same page with logins (`--login`); the benchmark signs in
through `/login` and calls the endpoints the page calls: a queued event through
`/gradio_api/queue/join` and its event stream (next study), an unqueued one through
`/gradio_api/run/predict` (save, rate). The floor is a Gradio page served by the same server
code (app/server.py, login included) whose events do nothing, queued and unqueued, measured in
the same run, call for call alternating with the real ones.

The save cost under `synchronous=FULL` (what the app uses) next to `NORMAL` comes from
bench/durability.py in the same run.

The 160,000-study database is built with bulk INSERTs (bench/synthetic.py: metadata, a reference
report and one image row per study, all pointing at one real radiograph, so the gallery's
preview is on disk after the first open). Targets on a 2-core machine: server side open p95 <
50 ms and save p99 < 20 ms at 160,000 studies, not more than 2x the 1,000-study figures; HTTP
save p99 < 100 ms; HTTP next study p95 < 300 ms; a 2-image JPEG 2000 study opened for the first
time < 300 ms.

Run: `.venv/bin/python -m bench.ui [--sizes 1000,160000] [--rounds 200] [--http 100]`
(a quick check: `--sizes 100,200 --rounds 3 --http 2 --http-sizes 100 --durability 10
--no-first-open`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from bench.processes import stop_process

ROOT = Path(__file__).resolve().parents[1]

READER, PASSWORD = "bench-reader", "bench password, long enough"
PRESET = "retrieval"  # the page's drafting preset (offline, no weights)
TARGETS = {  # (figure, percentile, limit in ms) at the largest size
    "open next study": (95, 50.0), "save": (99, 20.0)}
HTTP_TARGETS = {"HTTP save": (99, 100.0), "HTTP next study": (95, 300.0)}


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000, q))


def line(name: str, xs: list[float], extra: str = "") -> str:
    return (f"  {name:<30} p50 {pct(xs, 50):7.1f} ms  p95 {pct(xs, 95):7.1f} ms  "
            f"p99 {pct(xs, 99):7.1f} ms  (n={len(xs)}){extra}")


# -- what the page sends ------------------------------------------------------------------------
DEFAULTS = {"dropdown": "all", "textbox": "", "number": 0, "checkbox": False, "radio": None,
            "state": None, "markdown": None, "dataframe": None}


def input_values(components: list[tuple[str, str]], given: dict[str, Any]) -> list[Any]:
    """The data list of one event, as the page sends it: `components` are (elem_id, type) in
    the event's input order; `given` overrides by elem_id, everything else has the value a
    fresh page shows ('all' in the filters, empty boxes, page 1)."""
    base = {"worklist-page": 1}
    return [given.get(eid, base.get(eid, DEFAULTS.get(kind))) for eid, kind in components]


def client_report(study: int | None, seq: int) -> str:
    """What page.js reports with an event that carries text: the study the boxes belong to and
    a keystroke in findings (so the text counts as typed)."""
    now = time.time() * 1000
    return json.dumps({"study": study, "keys": {"findings": [now - 500, now]}, "seq": seq,
                       "visible": True, "idle_ms": 0})


# -- server side --------------------------------------------------------------------------------
class CountingMetrics:
    """The metrics panel the app uses, counting how often it computes (open and save must not)."""

    def __init__(self, inner) -> None:
        self.inner, self.calls = inner, 0

    def panel(self, texts):
        self.calls += 1
        return self.inner.panel(texts)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@dataclass
class Page:
    """One workstation page (Blocks) on one database, and one tab's session on it."""

    blocks: Any
    fns: dict[str, Any]
    state: Any
    loop: asyncio.AbstractEventLoop
    seq: int = 0
    study: int | None = None
    texts: dict[str, str] = field(default_factory=dict)  # what the boxes hold
    times: dict[str, list[float]] = field(default_factory=dict)

    def inputs(self, fn) -> list[tuple[str, str]]:
        return [(b.elem_id or "", b.get_block_name()) for b in fn.inputs]

    def call(self, name: str, given: dict[str, Any]) -> dict[str, Any]:
        """Run one event through Gradio's process_api; returns {elem_id: output}."""
        fn = self.fns[name]
        data = input_values(self.inputs(fn), given)
        out = self.loop.run_until_complete(self.blocks.process_api(
            fn, data, state=self.state, request=None, session_hash=self.state.hash,
            in_event_listener=True))
        return {b.elem_id: v for b, v in zip(fn.outputs, out["data"], strict=False)}


def _handler_index(blocks) -> dict[str, Any]:
    """The page's events by what they do: API names where they have one, else the trigger."""
    by_name = {fn.api_name: fn for fn in blocks.fns.values() if isinstance(fn.api_name, str)}
    return {"next_study": by_name["next_study"], "save": by_name["save"],
            "rate": by_name["rate"], "worklist_page": by_name["worklist_page"],
            "worklist_search": by_name["worklist_search"]}


class SizeBench:
    """One database of `n` studies, the page built on it as launch.py builds it, one tab."""

    def __init__(self, folder: Path, n: int, loop: asyncio.AbstractEventLoop,
                 seed: int = 0) -> None:
        from gradio.state_holder import SessionState
        from pydicom.data import get_testdata_file

        from bench.synthetic import SyntheticImage, add_studies
        from rrg_review.app.deps import Services
        from rrg_review.app.drafting.service import DraftingService
        from rrg_review.app.evaluation.study_metrics import StudyMetrics
        from rrg_review.app.page import build
        from rrg_review.app.settings import Settings
        from rrg_review.app.viewer.service import StudyViewer
        from rrg_review.app.worklist.panel import WorklistPanelLogic
        from rrg_review.metrics.registry import MetricConfig

        self.n = n
        self.path = folder / f"bench-{n}.sqlite"
        settings = Settings.from_args(str(self.path), str(folder / f"data-{n}"))
        self.db = settings.open_database()
        t0 = time.perf_counter()
        # drafted by the page's preset, as pre-drafting leaves a worklist: a study without a
        # draft cannot be rated ("Not rated: this study has no draft")
        add_studies(self.db, n, studies_per_patient=2, pseudonymised=True,
                    image=SyntheticImage(get_testdata_file("RG1_UNCI.dcm"), 1955, 1841),
                    draft_preset=PRESET)
        built = time.perf_counter() - t0
        self.viewer = StudyViewer(self.db, settings.blobs,
                                  preview_dir=settings.data_dir / "previews")
        services = Services.plain(self.viewer)
        self.reader = services.accounts.local_reader()
        t0 = time.perf_counter()
        services.worklists.assign(self.reader)
        assigned = time.perf_counter() - t0
        print(f"{n:,} studies: built in {built:.1f} s (bulk INSERT), assigned to a reader in "
              f"{assigned:.2f} s (INSERT ... SELECT)", flush=True)
        drafting = DraftingService(self.db, settings, decoded=self.viewer.decoded)
        self.metrics = CountingMetrics(StudyMetrics(self.db, config=MetricConfig(
            download=False)))
        blocks = build(Services(self.viewer, services.review, services.worklists,
                                services.accounts, services.exports, drafting, None, PRESET,
                                self.metrics, login=False))
        self.page = Page(blocks, _handler_index(blocks), SessionState(blocks), loop)
        self.page.state.hash = uuid.uuid4().hex
        self.logic = WorklistPanelLogic(services.worklists)
        self.rng = random.Random(seed)
        self.times: dict[str, list[float]] = {k: [] for k in (
            "open next study", "save", "rate", "worklist page", "search",
            "search within keys", "next unfinished")}
        self._step(None)  # warm-up: the first open writes the shared preview file

    def _step(self, times: list[float] | None) -> None:
        page = self.page
        page.seq += 1
        t = time.perf_counter()
        out = page.call("next_study", {**page.texts,
                                       "client": client_report(page.study, page.seq)})
        if times is not None:
            times.append(time.perf_counter() - t)
        page.study = json.loads(out["sync"])["study"]
        page.texts = {"edit-findings": out["edit-findings"],
                      "edit-impression": out["edit-impression"]}

    def round(self, i: int) -> None:
        times, page = self.times, self.page
        self._step(times["open next study"])
        page.seq += 1
        text = {"edit-findings": f"Edited findings {i}.", "edit-impression": "No acute disease.",
                "client": client_report(page.study, page.seq)}
        t = time.perf_counter()
        out = page.call("save", text)
        times["save"].append(time.perf_counter() - t)
        page.texts = {k: text[k] for k in ("edit-findings", "edit-impression")}
        if "revision" not in str(out.get("save-status")):
            raise RuntimeError(f"save did not save: {out.get('save-status')!r}")
        t = time.perf_counter()
        out = page.call("rate", {**text, "likert": 4})
        times["rate"].append(time.perf_counter() - t)
        if "Rated" not in str(out.get("rate-status")):
            raise RuntimeError(f"rate did not rate: {out.get('rate-status')!r}")
        pages = max(1, self.n // 50)
        t = time.perf_counter()
        page.call("worklist_page", {"worklist-page": self.rng.randint(1, max(1, pages - 1))})
        times["worklist page"].append(time.perf_counter() - t)
        t = time.perf_counter()
        page.call("worklist_search", {"worklist-search": f"CXR{self.rng.randint(1, self.n)}"})
        times["search"].append(time.perf_counter() - t)
        t = time.perf_counter()  # digits no key starts with: the keys that contain them
        page.call("worklist_search", {"worklist-search": f"{self.rng.randint(1, self.n)}"})
        times["search within keys"].append(time.perf_counter() - t)
        t = time.perf_counter()
        self.logic.target(self.reader, page.study, 1)
        times["next unfinished"].append(time.perf_counter() - t)


FIRST_OPEN_CASES = {  # label: (preview side, OpenJPEG threads)
    "previews <= 1024 px, all cores (launch.py)": (1024, "ALL_CPUS"),
    "previews <= 1024 px, one core (baseline)": (1024, "1"),
    "previews <= 512 px, all cores": (512, "ALL_CPUS"),
}


def bench_first_open(folder: Path, repeats: int = 5) -> dict[str, list[float]]:
    """A 2-image JPEG 2000 study (RG1_J2KR + RG1_J2KI), opened with nothing cached or on disk
    (`Desk.open` and the gallery's preview files), previews of at most `side` pixels (1955 px
    films: 1024 decodes at 1/2, 512 at 1/4 resolution), with OpenJPEG on every core as
    launch.py sets it (`decode_jpeg2000_on_all_cores`) and on one core as the baseline; the
    cases take turns."""
    from pydicom.data import get_testdata_file

    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.ingest.service import import_records
    from rrg_review.app.review.desk import Desk, Session
    from rrg_review.app.review.service import ReviewService
    from rrg_review.app.settings import Settings
    from rrg_review.app.viewer.service import StudyViewer
    from rrg_review.app.worklist.service import WorklistService
    from rrg_review.studies.pixels import OPENJPEG_THREADS
    from rrg_review.studies.records import ImageSource, ReportSections, StudyRecord

    settings = Settings.from_args(str(folder / "j2k.sqlite"))
    db = settings.open_database()
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
    reader = AccountService(review.db).local_reader()
    WorklistService(review.db).assign(reader)
    out: dict[str, list[float]] = {label: [] for label in FIRST_OPEN_CASES}
    before = os.environ.get(OPENJPEG_THREADS)
    try:
        for i in range(repeats):
            for n, (label, (side, threads)) in enumerate(FIRST_OPEN_CASES.items()):
                os.environ[OPENJPEG_THREADS] = threads  # read by OpenJPEG per decoder
                viewer = StudyViewer(db, settings.blobs,
                                     preview_dir=folder / f"previews-{n}-{i}")
                desk = Desk(viewer, review)
                t = time.perf_counter()
                opened = desk.open(Session(), reader, 1, time.monotonic())
                [viewer.preview_file(img, side) for img in opened.view.images]
                out[label].append(time.perf_counter() - t)
    finally:
        if before is None:
            os.environ.pop(OPENJPEG_THREADS, None)
        else:
            os.environ[OPENJPEG_THREADS] = before
    db.dispose()
    return out


# -- through HTTP -------------------------------------------------------------------------------
def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait(url: str, proc: subprocess.Popen, what: str) -> None:
    import httpx

    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before serving")
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise RuntimeError(f"{what} did not come up at {url}")


# A page served by the same server code as the app (app/server.py: our login, sessions and
# middleware), whose events do nothing: the floor of a queued and an unqueued event.
NOOP_APP = """
import sys
import gradio as gr
from rrg_review.app.server import ServerOptions, build_app, serve
from rrg_review.app.accounts.service import AccountService, SessionStore
from rrg_review.db.engine import open_database

db = open_database(sys.argv[2])
with gr.Blocks() as ui:
    state = gr.State({})
    out = gr.Markdown(elem_id="out")
    gr.Button("queued").click(lambda s: "", [state], [out], api_name="noop_queued")
    gr.Button("unqueued").click(lambda s: "", [state], [out], api_name="noop", queue=False)
options = ServerOptions(port=int(sys.argv[1]), login=True)
serve(build_app(ui, AccountService(db), SessionStore(), options), options)
"""


def sign_in(http: Any, base: str, name: str, password: str) -> Any:
    """Sign in through the login form as a browser does: the form first (its CSRF token and
    the pre-login cookie kept in `http`'s jar), then the post. `http` is an httpx.Client."""
    base = base.rstrip("/")
    form = http.get(f"{base}/login")
    token = re.search(r'name=csrf value="([^"]+)"', form.text)
    return http.post(f"{base}/login", data={"username": name, "password": password,
                                            "csrf": token.group(1) if token else ""},
                     headers={"accept": "application/json"})


class HttpPage:
    """One signed-in browser tab talking to a served page the way the page's script does."""

    def __init__(self, base: str, name: str = READER, password: str = PASSWORD) -> None:
        import httpx

        self.base = base.rstrip("/")
        self.http = httpx.Client(timeout=60)
        got = sign_in(self.http, self.base, name, password)
        got.raise_for_status()
        config = self.http.get(f"{self.base}/config").json()
        self.components = {c["id"]: (c.get("props", {}).get("elem_id") or "", c["type"])
                           for c in config["components"]}
        self.deps = {d["api_name"]: (i, d) for i, d in enumerate(config["dependencies"])
                     if d.get("api_name")}
        self.session = uuid.uuid4().hex

    def call(self, api_name: str, given: dict[str, Any]) -> dict[str, Any]:
        """One event as the page sends it: queued events through queue/join and the event
        stream, unqueued ones through run/predict. Returns {elem_id: output}."""
        index, dep = self.deps[api_name]
        fn_index = dep.get("id", index)
        inputs = [self.components[i] for i in dep["inputs"]]
        body = {"data": input_values(inputs, given), "fn_index": fn_index,
                "session_hash": self.session, "event_data": None,
                "trigger_id": dep["targets"][0][0] if dep.get("targets") else None}
        if dep.get("queue") is False:
            got = self.http.post(f"{self.base}/gradio_api/run/predict", json=body)
            got.raise_for_status()
            data = got.json()["data"]
        else:
            data = self._queued(body)
        return {self.components[i][0]: v for i, v in zip(dep["outputs"], data, strict=False)}

    def _queued(self, body: dict) -> list[Any]:
        got = self.http.post(f"{self.base}/gradio_api/queue/join", json=body)
        got.raise_for_status()
        event = got.json()["event_id"]
        with self.http.stream("GET", f"{self.base}/gradio_api/queue/data",
                              params={"session_hash": self.session}) as stream:
            for raw in stream.iter_lines():
                if not raw.startswith("data:"):
                    continue
                msg = json.loads(raw[5:])
                if msg.get("event_id") != event or msg.get("msg") != "process_completed":
                    continue
                if not msg.get("success", True):
                    raise RuntimeError(f"event failed: {msg.get('output')}")
                return msg["output"]["data"]
        raise RuntimeError("the event stream ended without the result")


def bench_http(db_path: Path, data_dir: Path, calls: int) -> dict[str, list[float]]:
    """launch.py --login on the database, and the no-op page; `calls` rounds of each."""
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.worklist.service import WorklistService
    from rrg_review.db.engine import open_database

    db = open_database(db_path)
    if AccountService(db).account(READER) is None:
        WorklistService(db).assign(AccountService(db).add(READER, PASSWORD))
    db.dispose()
    port, noop_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    # the servers' logs go to files: a pipe nobody reads fills up and blocks the server
    logs = [db_path.with_suffix(".app.log"), db_path.with_suffix(".noop.log")]
    app = subprocess.Popen([sys.executable, "launch.py", "--db", str(db_path), "--data-dir",
                            str(data_dir), "--port", str(port), "--login", "--no-demo",
                            "--no-predraft", "--model", PRESET], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=logs[0].open("w"))
    accounts_db = db_path.with_suffix(".accounts.sqlite")  # the no-op page's own logins
    if not accounts_db.exists():
        small = open_database(accounts_db)
        AccountService(small).add(READER, PASSWORD)
        small.dispose()
    noop = subprocess.Popen([sys.executable, "-c", NOOP_APP, str(noop_port), str(accounts_db)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=logs[1].open("w"))
    try:
        _wait(f"http://127.0.0.1:{port}/login", app, "the app")
        _wait(f"http://127.0.0.1:{noop_port}/login", noop, "the no-op page")
        page, floor = HttpPage(f"http://127.0.0.1:{port}"), HttpPage(
            f"http://127.0.0.1:{noop_port}")
        times: dict[str, list[float]] = {k: [] for k in (
            "HTTP no-op, queued", "HTTP next study", "HTTP no-op, unqueued", "HTTP save",
            "HTTP rate")}
        study, seq, boxes = None, 0, {}

        def timed(name: str, fn, *args):
            t = time.perf_counter()
            out = fn(*args)
            if name in times:
                times[name].append(time.perf_counter() - t)
            return out

        for i in range(calls + 3):  # the first 3 rounds warm up
            name = (lambda n: n) if i >= 3 else (lambda n: "")
            seq += 1
            timed(name("HTTP no-op, queued"), floor.call, "noop_queued", {})
            out = timed(name("HTTP next study"), page.call, "next_study",
                        {**boxes, "client": client_report(study, seq)})
            study = json.loads(out["sync"])["study"]
            boxes = {k: out[k] for k in ("edit-findings", "edit-impression")}
            seq += 1
            text = {"edit-findings": f"HTTP edit {i}.", "edit-impression": "Impression.",
                    "client": client_report(study, seq)}
            timed(name("HTTP no-op, unqueued"), floor.call, "noop", {})
            out = timed(name("HTTP save"), page.call, "save", text)
            boxes = {k: text[k] for k in ("edit-findings", "edit-impression")}
            if "revision" not in str(out.get("save-status")):
                raise RuntimeError(f"HTTP save did not save: {out.get('save-status')!r}")
            out = timed(name("HTTP rate"), page.call, "rate", {**text, "likert": 4})
            if "Rated" not in str(out.get("rate-status")):
                raise RuntimeError(f"HTTP rate did not rate: {out.get('rate-status')!r}")
        return times
    except Exception:
        for log in logs:
            print(f"--- {log.name} (last lines)\n{log.read_text()[-3000:]}", file=sys.stderr)
        raise
    finally:
        for proc in (app, noop):
            stop_process(proc)


# -- report -------------------------------------------------------------------------------------
def report_server(results: dict[int, dict[str, list[float]]],
                  metrics_calls: dict[int, int]) -> None:
    small = min(results)
    for n, times in results.items():
        print(f"{n:,} studies, server side (Gradio's process_api on the workstation page):")
        for name, xs in times.items():
            extra = ""
            if n != small:
                extra = (f"  x{pct(xs, 50) / pct(results[small][name], 50):.2f} p50, "
                         f"x{pct(xs, 95) / pct(results[small][name], 95):.2f} p95, "
                         f"x{pct(xs, 99) / pct(results[small][name], 99):.2f} p99 vs "
                         f"{small:,}")
            print(line(name, xs, extra))
        print(f"  metrics computed inside the timed events: {metrics_calls[n]} (must be 0)")
    sys.stdout.flush()


def report(results: dict[int, dict[str, list[float]]],
           http: dict[int, dict[str, list[float]]], first: dict[str, list[float]] | None,
           durability: dict[str, list[float]] | None) -> None:
    small, big = min(results), max(results)
    for n, times in http.items():
        print(f"{n:,} studies, through HTTP (signed in; next to a no-op page's floor):")
        for name, xs in times.items():
            print(line(name, xs))
    if first:
        print("2-image JPEG 2000 study, first open (nothing cached, no preview on disk):")
        for label, xs in first.items():
            print(line(f"first open, {label}", xs))
    if durability:
        for mode in ("NORMAL", "FULL"):
            print(line(f"durability save, sync={mode}", durability[mode]))
        ratio = pct(durability["FULL"], 50) / max(pct(durability["NORMAL"], 50), 1e-9)
        print(f"  FULL / NORMAL at p50: {ratio:.2f}x (bench/durability.py: ReviewService.save "
              "on its own database)")
    print(f"load average during the run: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} "
          f"(1 / 5 / 15 min) on {os.cpu_count()} cores")
    verdicts = []
    for name, (q, limit) in TARGETS.items():
        value = pct(results[big][name], q)
        ratio = value / pct(results[small][name], q)
        verdicts.append(f"{name} p{q} {value:.1f} ms at {big:,} (target < {limit:.0f}: "
                        f"{'met' if value < limit else 'MISSED'}), x{ratio:.2f} vs {small:,} "
                        f"(target <= 2: {'met' if ratio <= 2 else 'MISSED'})")
    page_ratio = pct(results[big]["worklist page"], 95) / pct(results[small]["worklist page"], 95)
    verdicts.append(f"worklist page p95 x{page_ratio:.2f} vs {small:,} (target <= 2: "
                    f"{'met' if page_ratio <= 2 else 'MISSED'})")
    for n, times in http.items():
        for name, (q, limit) in HTTP_TARGETS.items():
            value = pct(times[name], q)
            verdicts.append(f"{name} p{q} {value:.1f} ms at {n:,} (target < {limit:.0f}: "
                            f"{'met' if value < limit else 'MISSED'})")
    if first:
        labels = list(FIRST_OPEN_CASES)
        value, base = pct(first[labels[0]], 50), pct(first[labels[1]], 50)
        verdicts.append(f"JPEG 2000 first open p50 {value:.0f} ms at 1024 px as the app runs "
                        f"(target < 300: {'met' if value < 300 else 'MISSED'}); one core "
                        f"{base:.0f} ms, x{base / value:.2f}; {pct(first[labels[2]], 50):.0f} ms "
                        "at 512 px")
    print("targets:")
    for v in verdicts:
        print(f"  {v}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,160000",
                        help="worklist sizes to time (comma-separated)")
    parser.add_argument("--rounds", type=int, default=200,
                        help="rounds of the server-side events per size")
    parser.add_argument("--http", type=int, default=100, metavar="N",
                        help="HTTP rounds per size against the running app (0: none)")
    parser.add_argument("--http-sizes", metavar="LIST",
                        help="the sizes timed through HTTP (default: every size)")
    parser.add_argument("--no-first-open", action="store_true",
                        help="skip the JPEG 2000 first-open timing")
    parser.add_argument("--durability", type=int, default=200, metavar="N",
                        help="saves per mode for the FULL/NORMAL comparison (0: none)")
    parser.add_argument("--dir", default=None,
                        help="folder for the scratch databases (default: the system's temp)")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",") if s})

    from bench import durability

    loop = asyncio.new_event_loop()
    results: dict[int, dict[str, list[float]]] = {}
    metrics_calls: dict[int, int] = {}
    http: dict[int, dict[str, list[float]]] = {}
    if args.dir:  # (a folder not there yet is made: it was a FileNotFoundError traceback)
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        folder = Path(tmp)
        benches = [SizeBench(folder, n, loop) for n in sizes]
        for i in range(args.rounds):  # sizes take turns, so both see the same machine load
            for bench in benches:
                bench.round(i)
        for bench in benches:
            results[bench.n] = bench.times
            metrics_calls[bench.n] = bench.metrics.calls
            bench.db.dispose()
        loop.close()
        report_server(results, metrics_calls)
        first = None if args.no_first_open else bench_first_open(folder)
        over_http = ({int(s) for s in args.http_sizes.split(",") if s} if args.http_sizes
                     else set(sizes))
        if args.http:
            for bench in (b for b in benches if b.n in over_http):
                http[bench.n] = bench_http(bench.path, folder / f"data-{bench.n}", args.http)
        saves = (durability.measure(args.durability, folder / "durability")
                 if args.durability else None)
    report(results, http, first, saves)
    return 0


if __name__ == "__main__":
    sys.exit(main())
