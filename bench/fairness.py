"""Fairness benchmark: another reader's Next and Save while one signed-in client floods events.

launch.py serves a drafted database of synthetic studies (bench/synthetic.py) with `--login`;
two readers sign in through the login form. The reader measured ("alice") presses Next (a
queued event: `/gradio_api/queue/join` and the event stream) and Save (unqueued:
`/gradio_api/run/predict`), one after the other, as bench/ui.py's HTTP half does. First
unloaded, then while the flooder ("mallory", a reader too; a process of its own, as another
client is) sends queued Next events from several tabs as fast as `--rate` allows, never
waiting for their results (the issue measured ~840 a minute; the queue grew to 777 events and
alice's Next took 57.7 s). The flooder's answers are counted: accepted, refused with "slow
down" (429), other.

Printed, from the same run: alice's Next and Save p50/p95 unloaded and under the flood, and
the ratio of the p95s (the target: within 2x).

Run: `.venv/bin/python -m bench.fairness [--studies 300] [--calls 40] [--rate 30] [--tabs 3]
[--pace 0.5]` (alice starts a round every `--pace` seconds at most: faster than anyone
reads, yet a page's navigation is two queued events, and a client sending Next as fast as
answers come is a flood itself, held to the per-reader rate)
(a quick check: `--studies 30 --calls 5 --rate 20 --tabs 2`).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.processes import stop_process
from bench.ui import (
    PRESET,
    ROOT,
    HttpPage,
    _free_port,
    _wait,
    client_report,
    input_values,
    pct,
)

PASSWORDS = {"alice": "tulip river bench 0451", "mallory": "granite owl bench 7732"}


def build_database(folder: Path, studies: int) -> Path:
    """Synthetic drafted studies on everyone's worklist, and the two readers."""
    from pydicom.data import get_testdata_file

    from bench.synthetic import SyntheticImage, add_studies
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.settings import Settings
    from rrg_review.app.worklist.service import WorklistService

    path = folder / "fairness.sqlite"
    settings = Settings.from_args(str(path), str(folder / "data"))
    db = settings.open_database()
    add_studies(db, studies, studies_per_patient=2, pseudonymised=True,
                image=SyntheticImage(get_testdata_file("RG1_UNCI.dcm"), 1955, 1841),
                draft_preset=PRESET)
    accounts = AccountService(db)
    for name, password in PASSWORDS.items():
        WorklistService(db).assign(accounts.add(name, password))
    db.dispose()
    return path


class Reader:
    """alice's tab: Next, then Save of an edit, timed."""

    def __init__(self, base: str) -> None:
        self.page = HttpPage(base, "alice", PASSWORDS["alice"])
        self.study: int | None = None
        self.seq = 0
        self.boxes: dict[str, Any] = {}

    def round(self, times: dict[str, list[float]], i: int) -> None:
        self.seq += 1
        t = time.perf_counter()
        out = self.page.call("next_study", {**self.boxes,
                                            "client": client_report(self.study, self.seq)})
        times["Next"].append(time.perf_counter() - t)
        self.study = json.loads(out["sync"])["study"]
        self.seq += 1
        text = {"edit-findings": f"Fairness edit {i}.", "edit-impression": "Impression.",
                "client": client_report(self.study, self.seq)}
        t = time.perf_counter()
        out = self.page.call("save", text)
        times["Save"].append(time.perf_counter() - t)
        if "revision" not in str(out.get("save-status")):
            raise RuntimeError(f"save did not save: {out.get('save-status')!r}")
        self.boxes = {k: text[k] for k in ("edit-findings", "edit-impression")}


def flood(base: str, rate: float, tabs: int, stop: Any, out: Any) -> None:
    """mallory's tabs: queued Next events at `rate` a second in all, results never read.

    Run in a process of its own (`stop` a multiprocessing Event; the counted answers are put
    on `out`, a multiprocessing Queue): the flooding client is another program on another
    machine, not a thread of the measuring one. As a thread it held the measuring process's
    GIL while alice's answers waited to be read, so her times included the flooder's own
    Python work."""
    answers = Counter[str]()
    pages = [HttpPage(base, "mallory", PASSWORDS["mallory"]) for _ in range(tabs)]
    index, dep = pages[0].deps["next_study"]
    inputs = [pages[0].components[i] for i in dep["inputs"]]
    data = input_values(inputs, {"client": client_report(None, 1)})
    gap, k = 1.0 / rate, 0
    answers["started at"] = round(time.monotonic() * 1000)
    while not stop.is_set():
        page = pages[k % tabs]
        k += 1
        body = {"data": data, "fn_index": dep.get("id", index), "event_data": None,
                "session_hash": page.session,
                "trigger_id": dep["targets"][0][0] if dep.get("targets") else None}
        started = time.perf_counter()
        try:
            got = page.http.post(f"{page.base}/gradio_api/queue/join", json=body, timeout=30)
            answers["accepted" if got.status_code == 200 else
                    "slow down (429)" if got.status_code == 429 else f"{got.status_code}"] += 1
        except Exception as exc:  # a failed flood request is only counted
            answers[type(exc).__name__] += 1
        stop.wait(max(0.0, gap - (time.perf_counter() - started)))
    answers["ended at"] = round(time.monotonic() * 1000)
    out.put(dict(answers))


def measure(reader: Reader, calls: int, first: int, pace: float) -> dict[str, list[float]]:
    """Alice's rounds, one every `pace` seconds at most (a person reading; a client sending
    Next as fast as answers come is itself a flood, and the fair limits treat it as one)."""
    times: dict[str, list[float]] = {"Next": [], "Save": []}
    start = time.monotonic()
    for i in range(calls):
        time.sleep(max(0.0, start + i * pace - time.monotonic()))
        reader.round(times, first + i)
    return times


def run(args: argparse.Namespace, folder: Path) -> None:
    db = build_database(folder, args.studies)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    log = folder / "app.log"
    app = subprocess.Popen([sys.executable, "launch.py", "--db", str(db), "--data-dir",
                            str(folder / "data"), "--port", str(port), "--login", "--no-demo",
                            "--no-predraft", "--model", PRESET], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=log.open("w"))
    try:
        _wait(f"{base}/login", app, "the app")
        reader = Reader(base)
        measure(reader, 3, 0, args.pace)  # warm-up
        quiet = measure(reader, args.calls, 3, args.pace)
        processes = multiprocessing.get_context("spawn")
        stop, out = processes.Event(), processes.Queue()
        flooder = processes.Process(target=flood, args=(base, args.rate, args.tabs, stop, out),
                                    daemon=True)
        flooder.start()
        time.sleep(args.settle)  # the flooder's tabs sign in and fill their share
        loaded = measure(reader, args.calls, 3 + args.calls, args.pace)
        stop.set()
        answers = Counter[str](out.get(timeout=120))
        flooder.join(timeout=60)
        time.sleep(args.settle)  # the flood's queued events run out
        # unloaded again, after: the two unloaded phases together, so that the order of the
        # phases (a server warming up, the machine's other load) counts on both sides
        after = measure(reader, args.calls, 3 + 2 * args.calls, args.pace)
    finally:
        stop_process(app, grace_s=60)
    report(quiet, after, loaded, answers, args)


def report(before: dict[str, list[float]], after: dict[str, list[float]],
           loaded: dict[str, list[float]], answers: Counter[str],
           args: argparse.Namespace) -> None:
    seconds = (answers.pop("ended at", 0) - answers.pop("started at", 0)) / 1000
    sent = sum(answers.values())
    print(f"fairness: {args.studies} studies, alice {args.calls} rounds of Next + Save per "
          f"phase, one every {args.pace:g} s at most; flood: mallory, {args.tabs} tabs, "
          f"{args.rate:g} queued Next/s asked, {sent / max(seconds, 1e-9):.1f}/s sent "
          f"({sent} in {seconds:.1f} s), results unread")
    quiet = {name: before[name] + after[name] for name in before}
    for name in ("Next", "Save"):
        q95, l95 = pct(quiet[name], 95), pct(loaded[name], 95)
        print(f"  alice {name:<4} unloaded     p50 {pct(quiet[name], 50):7.1f} ms  "
              f"p95 {q95:7.1f} ms  (before {pct(before[name], 95):.1f}, after "
              f"{pct(after[name], 95):.1f})")
        print(f"  alice {name:<4} under flood  p50 {pct(loaded[name], 50):7.1f} ms  "
              f"p95 {l95:7.1f} ms")
        print(f"  alice {name:<4} p95 flood / unloaded: {l95 / q95:.2f}x (target <= 2x)")
    total = sum(answers.values())
    shown = ", ".join(f"{k} {v}" for k, v in sorted(answers.items()))
    print(f"  flood answers: {total} requests: {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--studies", type=int, default=300)
    parser.add_argument("--calls", type=int, default=40, help="alice's rounds per phase")
    parser.add_argument("--rate", type=float, default=30.0, help="flood events a second")
    parser.add_argument("--tabs", type=int, default=3, help="the flooder's tabs")
    parser.add_argument("--pace", type=float, default=0.5,
                        help="seconds between the starts of alice's rounds (default: 2 a second)")
    parser.add_argument("--settle", type=float, default=3.0,
                        help="seconds of flood before alice is measured")
    parser.add_argument("--dir", help="work folder (default: a temporary one)")
    args = parser.parse_args()
    if args.dir:
        run(args, Path(args.dir))
    else:
        with tempfile.TemporaryDirectory(prefix="rrg-fairness-") as folder:
            run(args, Path(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
