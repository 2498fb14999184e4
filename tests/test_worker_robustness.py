"""The worker-process drafter cannot freeze the app: real subprocesses that misbehave.

Each fake worker is a real executable (a Python script with a shebang) given as the worker's
interpreter, so the drafter starts it exactly as it starts a real worker environment's python.
"""

from __future__ import annotations

import os
import stat
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

from rrg_review.model.backends.worker_client import WorkerDrafter, WorkerError
from rrg_review.model.device import select
from rrg_review.model.inputs import InputImage, StudyInput
from rrg_review.model.presets import ModelRef, Preset

CPU = select("cpu")

# the part every fake worker shares: say ready, then answer requests by `answer(request)`
PROLOGUE = """
import json, os, sys, time
STATE = os.environ["FAKE_STATE"]
def send(message):
    sys.stdout.write(json.dumps(message) + "\\n"); sys.stdout.flush()
def starts():
    with open(os.path.join(STATE, "starts"), "a+") as f:
        f.write("x"); f.seek(0); return len(f.read())
def serve(answer):
    send({"ready": True, "revision": "fake", "device": "cpu", "dtype": "float32",
          "generation": {}})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "shutdown":
            return
        images = [im["path"] for im in request["images"]]
        with open(os.path.join(STATE, "seen"), "a") as f:
            f.write(json.dumps(images) + "\\n")
        assert all(os.path.isfile(p) for p in images)
        send(answer(request))
def echo(request):
    return {"id": request["id"], "sections": {s: f"text {len(request['images'])}"
                                             for s in request["sections"]}}
"""


def fake_worker(tmp_path: Path, body: str, monkeypatch) -> str:
    """An executable that stands in for the worker environment's python."""
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("FAKE_STATE", str(state))
    path = tmp_path / "fake-python"
    path.write_text(f"#!{sys.executable}\n" + PROLOGUE + textwrap.dedent(body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def preset(model_dir: Path, **options) -> Preset:
    return Preset("fake-worker", "worker", models={"report": ModelRef(str(model_dir))},
                  options={"adapter": "vision-encoder-decoder", "python_env": "FAKE_PY",
                           **options})


def study(sid: int) -> StudyInput:
    pixels = np.full((32, 32), sid * 10, dtype=np.uint8)
    return StudyInput(sid, (InputImage(pixels, "PA", "frontal", f"c{sid}"),))


def draft_with_deadline(drafter: WorkerDrafter, studies, deadline: float = 60.0):
    """Run draft() in a thread so a deadlock fails the test instead of hanging the suite."""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(drafter.draft(studies, ["findings"])),
                              daemon=True)
    thread.start()
    thread.join(deadline)
    assert not thread.is_alive(), "the drafter is blocked"
    assert out, "draft() raised"
    return out[0]


def test_200_kb_of_stderr_before_ready_does_not_block(tmp_path, monkeypatch):
    python = fake_worker(tmp_path, """
        for i in range(2000):  # ~200 KB, far more than a pipe buffer, before "ready"
            sys.stderr.write(f"warning {i:05d} " + "x" * 90 + "\\n")
        sys.stderr.flush()
        serve(echo)
    """, monkeypatch)
    drafter = WorkerDrafter(preset(tmp_path), CPU, python=python, startup_timeout=60)
    try:
        results = draft_with_deadline(drafter, [study(1), study(2)])
        assert [r.text for r in results] == ["text 1", "text 1"]
        assert "warning 01999" in drafter._worker.stderr_tail()
    finally:
        drafter.close()


def test_temporary_images_are_removed_after_each_reply(tmp_path, monkeypatch):
    python = fake_worker(tmp_path, "serve(echo)", monkeypatch)
    drafter = WorkerDrafter(preset(tmp_path), CPU, python=python)
    try:
        draft_with_deadline(drafter, [study(1), study(2), study(3)])
        seen = (tmp_path / "state" / "seen").read_text().split("\n")
        assert len([s for s in seen if s]) == 3  # the worker saw each image on disk ...
        assert list(drafter.temp_dir.iterdir()) == []  # ... and none is left behind
    finally:
        drafter.close()


def test_a_hung_worker_times_out_and_the_next_study_gets_a_fresh_one(tmp_path, monkeypatch):
    python = fake_worker(tmp_path, """
        def hang_first_time(request):
            if starts_now == 1:
                time.sleep(3600)
            return echo(request)
        starts_now = starts()
        serve(hang_first_time)
    """, monkeypatch)
    drafter = WorkerDrafter(preset(tmp_path, request_timeout=1), CPU, python=python)
    try:
        hung, fine = draft_with_deadline(drafter, [study(1), study(2)])
        assert hung.error.startswith("WorkerTimeout: the worker gave no reply within 1 s")
        assert fine.ok and fine.text == "text 1"
        assert drafter.starts == 2
        assert list(drafter.temp_dir.iterdir()) == []
    finally:
        drafter.close()


def test_a_worker_that_never_says_ready_times_out_with_its_stderr(tmp_path, monkeypatch):
    python = fake_worker(tmp_path, """
        sys.stderr.write("loading shards...\\n"); sys.stderr.flush()
        time.sleep(3600)
    """, monkeypatch)
    drafter = WorkerDrafter(preset(tmp_path, startup_timeout=1), CPU, python=python)
    with pytest.raises(WorkerError, match=r"did not start within 1 s: loading shards"):
        draft_with_deadline_raising(drafter)
    assert drafter._worker is None  # killed, not left running


def draft_with_deadline_raising(drafter: WorkerDrafter):
    errors: list[BaseException] = []

    def run() -> None:
        try:
            drafter.draft([study(1)], ["findings"])
        except BaseException as exc:  # re-raised below in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the drafter is blocked"
    if errors:
        raise errors[0]


def test_a_crashing_worker_is_restarted_once(tmp_path, monkeypatch):
    python = fake_worker(tmp_path, """
        def crash_first_time(request):
            if starts_now == 1:
                sys.stderr.write("Segmentation fault (core dumped)\\n"); sys.stderr.flush()
                os._exit(139)
            return echo(request)
        starts_now = starts()
        serve(crash_first_time)
    """, monkeypatch)
    drafter = WorkerDrafter(preset(tmp_path), CPU, python=python)
    try:
        first, second = draft_with_deadline(drafter, [study(1), study(2)])
        assert first.ok and second.ok  # the crash cost a restart, not a draft
        assert drafter.starts == 2
    finally:
        drafter.close()


def test_a_worker_crashing_again_after_its_restart_is_reported(tmp_path, monkeypatch):
    python = fake_worker(tmp_path, """
        def crash(request):
            sys.stderr.write(f"CUDA error: illegal memory access (start {n})\\n")
            sys.stderr.flush()
            os._exit(134)
        n = starts()
        serve(crash)
    """, monkeypatch)
    drafter = WorkerDrafter(preset(tmp_path), CPU, python=python)
    try:
        (result,) = draft_with_deadline(drafter, [study(1)])
        assert result.error.startswith("WorkerCrashed: the worker crashed on this study again")
        assert "code 134" in result.error and "illegal memory access (start 2)" in result.error
        assert drafter.starts == 2
    finally:
        drafter.close()


def test_a_reply_to_another_request_is_never_paired_with_this_study(tmp_path, monkeypatch):
    python = fake_worker(tmp_path, """
        def wrong_id(request):
            return {**echo(request), "id": request["id"] + 100}
        serve(wrong_id)
    """, monkeypatch)
    drafter = WorkerDrafter(preset(tmp_path), CPU, python=python)
    try:
        (result,) = draft_with_deadline(drafter, [study(1)])
        assert result.text is None and "answered request 101 when 1 was asked" in result.error
    finally:
        drafter.close()


def test_stray_stdout_lines_are_skipped_and_shutdown_is_clean(tmp_path, monkeypatch):
    python = fake_worker(tmp_path, """
        os.write(1, b"a C library printing on fd 1\\n")
        serve(echo)
    """, monkeypatch)
    drafter = WorkerDrafter(preset(tmp_path), CPU, python=python)
    (result,) = draft_with_deadline(drafter, [study(1)])
    proc = drafter._proc
    drafter.close()
    assert result.text == "text 1" and proc.poll() == 0
    assert not os.path.exists(drafter.temp_dir) or list(drafter.temp_dir.iterdir()) == []
