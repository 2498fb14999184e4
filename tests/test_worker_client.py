"""The one worker client (core/worker_client.py) against real misbehaving subprocesses: a worker
that hangs, one that dies mid-request, one that floods stderr, one that prints garbage. Each is
one sentence, and the next request gets a fresh worker that answers. The metric workers use the
same client: a hung metric worker no longer blocks scoring."""

from __future__ import annotations

import json
import stat
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rrg_review.core.worker_client import (
    WorkerClient,
    WorkerCrashed,
    WorkerError,
    WorkerStartFailed,
    WorkerTimeout,
)
from rrg_review.metrics.scoring import score
from rrg_review.metrics.worker_client import SPECS, STAMP, WorkerMetric

# the first start misbehaves as its mode says; later starts answer (the state file counts them)
WORKER = textwrap.dedent("""
    import json, os, sys, time
    mode, state = sys.argv[1], sys.argv[2]
    n = int(open(state).read()) + 1 if os.path.exists(state) else 1
    with open(state, "w") as f:
        f.write(str(n))
    first = n == 1
    if first and mode == "never-ready":
        sys.stderr.write("loading shards...\\n"); sys.stderr.flush()
        time.sleep(3600)
    if first and mode == "refuses":
        print(json.dumps({"ready": False, "error": "needs a CUDA GPU\\nand 14 GB"}), flush=True)
        sys.exit(3)
    print(json.dumps({"ready": True, "start": n}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "shutdown":
            break
        if first and mode == "hang":
            time.sleep(3600)
        if first and mode == "die":
            sys.stderr.write("Traceback (most recent call last):\\n  File x\\n")
            sys.stderr.write("Segmentation fault (core dumped)\\n"); sys.stderr.flush()
            os._exit(139)
        if first and mode == "flood":  # 8 MB with and without line ends, then silence
            sys.stderr.write(("warning " + "x" * 990 + "\\n") * 4000)
            sys.stderr.write("y" * 4_000_000)
            sys.stderr.write("\\nlast words\\n"); sys.stderr.flush()
            time.sleep(3600)
        if first and mode == "garbage":  # forever, each line resetting nothing
            while True:
                print("\\x00 garbage \\u2620 not json [", flush=True)
                time.sleep(0.005)
        if first and mode == "wrong-id":
            request["id"] += 100
        reply = {"id": request["id"], "echo": request.get("x"), "start": n}
        if "hyps" in request:  # as a metric worker answers
            reply = {"id": request["id"], "values": [0.5] * len(request["hyps"])}
        print(json.dumps(reply), flush=True)
""")


def make_worker(tmp_path: Path) -> Path:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    return script


def client(timeout: float = 3.0) -> WorkerClient:
    return WorkerClient("the test worker", startup_timeout=30.0, request_timeout=timeout)


def one_sentence(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and "Traceback" not in text and len(text) < 700, text
    return text


def within(seconds: float, fn, *args):
    """fn(*args) in a thread that must end within `seconds` (a hang fails the test, not CI)."""
    out: list = []

    def run() -> None:
        try:
            out.append(("ok", fn(*args)))
        except BaseException as exc:
            out.append(("raised", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for more than {seconds} s"
    kind, value = out[0]
    if kind == "raised":
        raise value
    return value


@pytest.mark.parametrize(("mode", "error", "words"), [
    ("hang", WorkerTimeout, "the test worker gave no reply within 3 s and was stopped"),
    ("die", WorkerCrashed, "the test worker crashed: worker exited (code 139): "),
    ("flood", WorkerTimeout, "the test worker gave no reply within 3 s and was stopped"),
    ("garbage", WorkerTimeout, "line(s) that are not protocol, the last"),
    ("wrong-id", WorkerError, "answered request 101 when 1 was asked; it was stopped"),
])
def test_a_misbehaving_worker_is_one_sentence_and_the_next_request_works(
        tmp_path, mode, error, words):
    script = make_worker(tmp_path)
    cmd = [sys.executable, str(script), mode, str(tmp_path / "starts")]
    worker = client()
    try:
        assert within(60, worker.start, cmd)["start"] == 1
        started = time.monotonic()
        with pytest.raises(error) as caught:
            within(60, worker.request, {"x": "first"})
        assert time.monotonic() - started < 30  # 3 s, and the kill, under load
        said = one_sentence(caught.value)
        assert words in said
        if mode == "die":
            assert said.endswith("Segmentation fault (core dumped)")
        if mode == "flood":
            assert said.endswith("(last words)")
        assert worker.process is None  # discarded: nothing left running
        assert within(60, worker.start, cmd)["start"] == 2
        assert within(60, worker.request, {"x": "second"}) == {
            "id": 2, "echo": "second", "start": 2}
        assert worker.starts == 2
    finally:
        worker.stop(grace=5)


@pytest.mark.parametrize(("mode", "words"), [
    ("never-ready", "the test worker did not start within 2 s: loading shards..."),
    ("refuses", "the test worker failed to start: needs a CUDA GPU | and 14 GB"),
])
def test_a_worker_that_does_not_get_ready_is_one_sentence_and_the_next_start_works(
        tmp_path, mode, words):
    cmd = [sys.executable, str(make_worker(tmp_path)), mode, str(tmp_path / "starts")]
    worker = WorkerClient("the test worker", startup_timeout=2.0, request_timeout=30.0)
    try:
        with pytest.raises(WorkerStartFailed) as caught:
            within(60, worker.start, cmd)
        assert one_sentence(caught.value) == words
        assert worker.process is None
        assert within(60, worker.start, cmd)["start"] == 2
        assert within(60, worker.request, {"x": 1})["echo"] == 1
    finally:
        worker.stop(grace=5)


def test_a_missing_interpreter_is_one_sentence(tmp_path):
    worker = client()
    with pytest.raises(WorkerStartFailed) as caught:
        worker.start([str(tmp_path / "no-python"), "x"])
    assert "the test worker failed to start: cannot start worker" in one_sentence(caught.value)


def fake_metric_env(tmp_path: Path, mode: str) -> Path:
    """A metric worker "environment" whose python runs the misbehaving worker above (the
    command line the metric gives is ignored), with a stamp so the metric is available."""
    folder = tmp_path / "env"
    (folder / "bin").mkdir(parents=True)
    python = folder / "bin" / "python"
    script = make_worker(tmp_path)
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script} {mode} {tmp_path / 'starts'}\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    (folder / STAMP).write_text(json.dumps({"metric": "selftest", "freeze_sha256": "0" * 64}))
    return folder


def test_a_hung_metric_worker_no_longer_blocks_scoring(tmp_path):
    metric = WorkerMetric(SPECS["selftest"], fake_metric_env(tmp_path, "hang"),
                          request_timeout=2)
    try:
        # the first attempt hangs and is stopped; scoring's one retry gets a fresh worker
        report = within(120, lambda: score(["a", "b"], ["a", "c"], [metric], n_resamples=0))
        assert report.unavailable == {}
        assert list(report.per_sample["selftest"]) == [0.5, 0.5]
        assert metric._client.starts == 2
        assert (metric.folder / "worker.log").is_file()
    finally:
        metric.close()


def test_a_metric_worker_that_dies_is_restarted_on_the_next_request(tmp_path):
    metric = WorkerMetric(SPECS["selftest"], fake_metric_env(tmp_path, "die"))
    try:
        with pytest.raises(WorkerCrashed) as caught:
            within(60, metric.compute, ["a"], ["b"])
        assert one_sentence(caught.value).startswith(
            "the selftest worker crashed: worker exited (code 139)")
        assert within(60, metric.compute, ["a"], ["b"]) == [{"selftest": 0.5}]
        assert metric._client.starts == 2
    finally:
        metric.close()
