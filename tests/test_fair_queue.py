"""Fair service (app/fair.py) on a real server: our app/server.py in front of a Gradio page
whose one queued event takes 0.3 s (one at a time, Gradio's default), in a subprocess.

mallory floods one tab with events; alice, joining after, is served next instead of after
all of them, and mallory's events over the tab's limit are answered "slow down" (429).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from bench.processes import stop_process
from rrg_review.app.fair import FairLimits
from tests.browser import free_port, sign_in, wait_for_port
from tests.conftest import TEST_PASSWORD_COST

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # a server subprocess (~6 s)
PASSWORDS = {"alice": "tulip-river-0451", "mallory": "granite-owl-7732"}
SLOW_APP = """
import sys, time
import gradio as gr
from rrg_review.app.server import ServerOptions, build_app, serve
from rrg_review.app.accounts.service import AccountService, SessionStore
from rrg_review.db.engine import open_database

db = open_database(sys.argv[2])
ran = []

def slow(request: gr.Request):
    time.sleep(0.3)
    ran.append(request.username)
    return ""

with gr.Blocks() as ui:
    out = gr.Markdown()
    gr.Button("slow").click(slow, None, [out], api_name="slow")
    gr.Button("order").click(lambda: ",".join(ran), None, [out], api_name="order",
                             queue=False)
options = ServerOptions(port=int(sys.argv[1]), login=True)
serve(build_app(ui, AccountService(db, password_cost=int(sys.argv[3])), SessionStore(), options),
      options)
"""


@pytest.fixture
def slow_app(tmp_path):
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.db.engine import open_database

    path = tmp_path / "accounts.sqlite"
    db = open_database(path)
    for name, password in PASSWORDS.items():
        AccountService(db, password_cost=TEST_PASSWORD_COST).add(name, password)
    db.dispose()
    port = free_port()
    log = tmp_path / "app.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (os.environ.get("PYTHONPATH"), str(ROOT)) if p)}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-c", SLOW_APP, str(port), str(path),
                                 str(TEST_PASSWORD_COST)],
                                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for_port(port, proc, time.monotonic() + 120, log.read_text)
        yield f"http://127.0.0.1:{port}/"
    finally:
        stop_process(proc)


class Tab:
    def __init__(self, url: str, name: str) -> None:
        self.http = httpx.Client(base_url=url, timeout=60)
        assert sign_in(self.http, "", name, PASSWORDS[name]).status_code == 200
        deps = self.http.get("config").json()["dependencies"]
        self.fn = {d["api_name"]: d["id"] for d in deps if d.get("api_name")}
        self.session = uuid.uuid4().hex[:11]

    def join(self, api_name: str) -> httpx.Response:
        return self.http.post("gradio_api/queue/join", json={
            "data": [], "fn_index": self.fn[api_name], "session_hash": self.session,
            "event_data": None, "trigger_id": None})

    def order(self) -> list[str]:
        got = self.http.post("gradio_api/run/predict", json={
            "data": [], "fn_index": self.fn["order"], "session_hash": self.session})
        got.raise_for_status()
        return [n for n in got.json()["data"][0].split(",") if n]


def test_a_flooding_tab_is_told_to_slow_down_and_another_reader_goes_next(slow_app):
    mallory, alice = Tab(slow_app, "mallory"), Tab(slow_app, "alice")
    limit = FairLimits().tab_limit
    statuses = [mallory.join("slow") for _ in range(limit + 3)]
    assert [s.status_code for s in statuses] == [200] * limit + [429] * 3
    assert "Slow down" in statuses[-1].json()["detail"]
    assert alice.join("slow").status_code == 200  # joined behind all of mallory's
    deadline = time.monotonic() + 60
    while len(ran := alice.order()) < limit + 1:
        assert time.monotonic() < deadline, ran
        time.sleep(0.3)
    # served right after what was already running (mallory's first one or two), not 13th
    assert ran.index("alice") <= 2, ran
    # Gradio's "call" API adds events to the same queue: it is held to the same limits (a
    # review found 60 of 60 accepted, around every limit)
    before = len(alice.order())  # (alice is still reading)
    called = [mallory.http.post("gradio_api/call/slow", json={"data": []}).status_code
              for _ in range(40)]
    # at most the reader's limit waiting at once: each event that ran meanwhile (0.3 s each)
    # made room for one more (a loaded CI run posted the 40 slowly enough for 26 = 24 + 2)
    ran_meanwhile = len(alice.order()) - before
    assert 429 in called, called
    assert called.count(200) <= FairLimits().reader_limit + ran_meanwhile, (called,
                                                                            ran_meanwhile)
