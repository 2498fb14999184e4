"""The running app in headless Chromium (Debian's package, installed by `make test`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def app_url(tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (make test installs Debian's chromium)")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "launch.py", "--db", str(tmp_path / "ui.sqlite"), "--port", str(port)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"app exited early:\n{proc.stdout.read()}")
        try:
            urllib.request.urlopen(url, timeout=1)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("app did not start within 90 s")
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture
def page(app_url):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(app_url)
        yield page
        browser.close()


def test_open_a_demo_study_see_its_image_and_its_prior(page):
    page.wait_for_selector("#worklist")
    # Gradio keeps hidden copies of table cells for measuring: click the visible one.
    page.get_by_text("DEMO-0002", exact=True).filter(visible=True).first.click()
    header = page.locator("#study-header")
    header.get_by_text("Follow-up of known pulmonary metastases").wait_for()
    assert "Prior studies: 1" in header.inner_text()
    image = page.locator("#study-images img").first
    image.wait_for()
    assert page.evaluate("img => img.naturalWidth", image.element_handle()) > 500
    assert "persist throughout both lungs" in page.locator("#ref-findings textarea").input_value()
    page.locator("#open-prior").click()
    header.get_by_text("DEMO-0001").wait_for()
    assert "Cough and weight loss" in header.inner_text()


def _drafted_keys(db: Path) -> set[str]:
    import sqlite3

    with sqlite3.connect(db) as con:
        return {k for (k,) in con.execute(
            "SELECT DISTINCT s.study_key FROM draft d JOIN study s ON s.id = d.study_id "
            "WHERE d.error IS NULL")}


def test_draft_on_request_and_predrafted_next_study(page, app_url, tmp_path):
    page.wait_for_selector("#worklist")
    page.get_by_text("DEMO-0002", exact=True).filter(visible=True).first.click()
    page.locator("#study-header").get_by_text("DEMO-0002").wait_for()
    assert "Offline default (retrieval)" in page.locator("#draft-model").inner_text()
    # the background worker drafts the studies after this one while the reader works
    deadline = time.monotonic() + 60
    while not (_drafted_keys(tmp_path / "ui.sqlite") - {"DEMO-0002"}):
        assert time.monotonic() < deadline, "nothing was pre-drafted within 60 s"
        time.sleep(0.5)
    page.locator("#draft-button").click()
    findings = page.locator("#draft-findings textarea")
    page.wait_for_function("el => el.value.length > 20", arg=findings.element_handle())
    assert "copied from study" in page.locator("#draft-model").inner_text()
    # a pre-drafted study shows its draft at once, without asking for one
    ready = sorted(_drafted_keys(tmp_path / "ui.sqlite") - {"DEMO-0002"})[0]
    page.get_by_text(ready, exact=True).filter(visible=True).first.click()
    page.locator("#study-header").get_by_text(ready).wait_for()
    page.wait_for_function("el => el.value.length > 20", arg=findings.element_handle())
    assert page.locator("#draft-button").inner_text() == "Regenerate"
