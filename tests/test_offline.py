"""Offline by construction: on a machine whose hub never answers (a hospital reading room), the
real CLI finishes at once with what is cached, and says what is not and how to fetch it.

The "network" is a loopback port that accepts connections and never answers (what a firewall
that drops packets looks like to a client), or one that refuses them; the Hugging Face cache,
the radgraph cache and the metric workers' folder are empty folders under tmp (HOME, HF_HOME).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.drafting.service import DraftingService, RuntimeConfig
from rrg_review.app.review.service import ReviewService
from rrg_review.app.setup import seed_demo
from rrg_review.app.worklist.service import WorklistService
from tests.conftest import TEST_PASSWORD_COST

ROOT = Path(__file__).resolve().parents[1]
# the bound is 30 s on a quiet machine; before the fix this export ran for minutes
BOUND_S = 90


class Endpoint(str):
    """An http://127.0.0.1:PORT address, with the first bytes of each connection it accepted."""

    accepted: list[bytes]


@pytest.fixture
def silent_hub() -> Iterator[Endpoint]:
    """http://127.0.0.1:PORT that accepts connections and never says a word (closed after);
    `.accepted`: what each connection sent first."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.2)
    held: list[socket.socket] = []
    stop = threading.Event()

    endpoint = Endpoint(f"http://127.0.0.1:{server.getsockname()[1]}")
    endpoint.accepted = []

    def accept() -> None:
        while not stop.is_set():
            try:
                conn = server.accept()[0]
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)
            conn.settimeout(1)
            try:
                endpoint.accepted.append(conn.recv(200))
            except OSError:
                endpoint.accepted.append(b"")

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield endpoint
    stop.set()
    thread.join(timeout=5)
    for conn in held:
        conn.close()
    server.close()


@pytest.fixture
def refusing_hub() -> str:
    """http://127.0.0.1:PORT where nothing listens (the port was bound, then freed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture
def three_studies(db, settings, monkeypatch):
    """Three demo studies drafted by the offline retrieval preset and rated by one reader."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # building it must not probe anything
    seed_demo(db, settings)
    review, worklists = ReviewService(db), WorklistService(db)
    reader = AccountService(db, password_cost=TEST_PASSWORD_COST).add("a", "pw-a-123456")
    worklists.assign(reader)
    ids = [w.study_id for w in worklists.items(reader)][:3]
    DraftingService(db, settings, RuntimeConfig(device="cpu")).draft(ids, "retrieval")
    for sid in ids:
        review.rate(reader, sid, likert=4, acceptable=True, errors={}, preset="retrieval")
    return settings


def _offline_env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "TRANSFORMERS_", "RRG_REVIEW_"))}
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return {**env, "HOME": str(home), "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": endpoint,
            "PYTHONPATH": str(ROOT / "src")}


def _cli(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "rrg_review.app.cli", *args], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    return res, time.monotonic() - start


@pytest.mark.parametrize("hub", ["silent_hub", "refusing_hub"])
def test_export_without_network_lists_every_weight_metric_at_once(hub, three_studies,
                                                                  tmp_path, request):
    env = _offline_env(tmp_path, request.getfixturevalue(hub))
    out = tmp_path / "report.html"
    res, seconds = _cli(env, "export", "--format", "html", "--out", str(out),
                        "--db", three_studies.db_url)
    said = res.stdout + res.stderr
    assert res.returncode == 0, said
    assert seconds < BOUND_S, f"export took {seconds:.1f} s without network"
    assert "Traceback" not in said
    assert "no network" in said and env["HF_ENDPOINT"] in said
    for key in ("bertscore", "radgraph_partial", "chexbert_5_micro_f1"):
        line = next((ln for ln in said.splitlines() if key in ln and "evaluation without" in ln),
                    None)
        assert line is not None, f"{key} not listed as unavailable:\n{said}"
        assert "rrg-review models --fetch-metrics" in line
    assert out.is_file() and "fetch-metrics" in out.read_text(encoding="utf-8")


def test_fetch_without_network_says_so_in_one_sentence(silent_hub, tmp_path):
    env = _offline_env(tmp_path, silent_hub)
    res, seconds = _cli(env, "models", "--fetch-metrics")
    assert res.returncode == 2 and seconds < BOUND_S
    assert res.stderr.startswith("error: nothing can be fetched: no network") and \
        silent_hub in res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_the_hub_is_asked_once_and_hf_hub_offline_is_taken_at_its_word(tmp_path, silent_hub):
    from rrg_review.model.hub import hub_unreachable

    start = time.monotonic()
    why = hub_unreachable({"HF_ENDPOINT": silent_hub}, seconds=0.5)
    assert why is not None and ("no answer" in why or "timed out" in why), why
    assert time.monotonic() - start < 5
    assert hub_unreachable({"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": silent_hub}) == \
        "downloads are off (HF_HUB_OFFLINE is set)"


def test_settings_decide_once_and_tell_the_libraries(tmp_path, silent_hub, monkeypatch, caplog):
    import logging

    import huggingface_hub.constants as constants

    from rrg_review.app.settings import Settings

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # restored after the test, as is ...
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # ... the library's own switch
    settings = Settings.from_args(str(tmp_path / "x.sqlite"),
                                  environ={"HF_ENDPOINT": silent_hub})
    with caplog.at_level(logging.WARNING, logger="rrg_review.app.settings"):
        start = time.monotonic()
        config = settings.metric_config(device="cpu")
        assert settings.metric_config().download is False  # asked once: no second wait
        assert time.monotonic() - start < 10
    assert config.download is False and config.device == "cpu"
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["no network"]  # once
    assert os.environ["HF_HUB_OFFLINE"] == "1" and constants.HF_HUB_OFFLINE is True
    # the user's own HF_HUB_OFFLINE: no probe, nothing to warn about
    caplog.clear()
    chosen = Settings.from_args(str(tmp_path / "x.sqlite"), environ={"HF_HUB_OFFLINE": "1"})
    assert chosen.downloads() is False and caplog.records == []
    # a command's own --offline is kept as it is, without asking the hub
    assert Settings.from_args(str(tmp_path / "x.sqlite"), environ={
        "HF_ENDPOINT": silent_hub}).metric_config(download=False).download is False


def test_the_workstation_asks_no_outside_server_anything_when_it_starts(
        silent_hub, tmp_path, database_templates, monkeypatch):
    """Gradio's analytics, on by default, had every start ask api.gradio.app for Gradio's latest
    version (from a thread: nothing waited, but a request left the reading room's machine). The
    app is started with every HTTP(S) request sent through a proxy that counts them: none
    comes, while the page is served."""
    import urllib.request

    from tests.browser import App, demo_copy

    for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.setenv(name, silent_hub)
    for name in ("NO_PROXY", "no_proxy"):  # (the test's own requests to the app go direct)
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    app = App(demo_copy(database_templates, tmp_path / "app.sqlite"), "--no-demo",
              "--no-predraft")
    try:
        with urllib.request.urlopen(app.url + "config", timeout=60) as answer:
            assert b'"analytics_enabled":false' in answer.read().replace(b" ", b"")
        time.sleep(2)  # (Gradio's check starts with the page's Blocks, before the port opens)
    finally:
        app.stop()
    assert silent_hub.accepted == [], silent_hub.accepted
