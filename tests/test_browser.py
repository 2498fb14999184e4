"""The running app in headless Chromium (Debian's package, installed by `make test`)."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class App:
    def __init__(self, db: Path, *args: str) -> None:
        if not os.path.exists(CHROMIUM):
            pytest.skip(f"{CHROMIUM} not installed (make test installs Debian's chromium)")
        self.db = db
        port = free_port()
        self.url = f"http://127.0.0.1:{port}/"
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "launch.py", "--db", str(db), "--port", str(port), *args],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"app exited early:\n{self.proc.stdout.read()}")
            try:
                urllib.request.urlopen(self.url, timeout=1)
                return
            except OSError:
                time.sleep(0.5)
        self.proc.kill()
        pytest.fail("app did not start within 90 s")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=20)


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield b
        b.close()


@pytest.fixture
def app(tmp_path):
    running = App(tmp_path / "ui.sqlite")
    yield running
    running.stop()


def new_page(browser, url: str):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(url)
    return page


def click_row(page, key: str) -> None:
    # Gradio keeps hidden copies of table cells for measuring: click the visible one.
    page.get_by_text(key, exact=True).filter(visible=True).first.click()
    page.locator("#study-header").get_by_text(key).wait_for()


def test_open_a_demo_study_see_its_image_and_its_prior(browser, app):
    page = new_page(browser, app.url)
    page.wait_for_selector("#worklist")
    click_row(page, "DEMO-0002")
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
    with sqlite3.connect(db) as con:
        return {k for (k,) in con.execute(
            "SELECT DISTINCT s.study_key FROM draft d JOIN study s ON s.id = d.study_id "
            "WHERE d.error IS NULL")}


def test_draft_on_request_and_predrafted_next_study(browser, app):
    page = new_page(browser, app.url)
    page.wait_for_selector("#worklist")
    click_row(page, "DEMO-0002")
    assert "Offline default (retrieval)" in page.locator("#draft-model").inner_text()
    # the background worker drafts the studies after this one while the reader works
    deadline = time.monotonic() + 60
    while not (_drafted_keys(app.db) - {"DEMO-0002"}):
        assert time.monotonic() < deadline, "nothing was pre-drafted within 60 s"
        time.sleep(0.5)
    page.locator("#draft-button").click()
    findings = page.locator("#edit-findings textarea")
    page.wait_for_function("el => el.value.length > 20", arg=findings.element_handle())
    page.locator("#draft-model").get_by_text("copied from study").wait_for()
    # a pre-drafted study shows its draft at once, without asking for one
    ready = sorted(_drafted_keys(app.db) - {"DEMO-0002"})[0]
    click_row(page, ready)
    page.wait_for_function("el => el.value.length > 20", arg=findings.element_handle())
    assert page.locator("#draft-button").inner_text() == "Regenerate"
    page.locator("#unload-model").click()
    page.locator("#draft-model").get_by_text("unloaded").wait_for()


def test_review_a_study_end_to_end_with_login(browser, tmp_path):
    db = tmp_path / "review.sqlite"
    add = subprocess.run(
        [sys.executable, "-m", "app.cli", "readers", "add", "dr.ana", "--password-stdin",
         "--db", str(db)], input="correct horse\n", capture_output=True, text=True, cwd=ROOT)
    assert add.returncode == 0, add.stderr
    running = App(db, "--login")
    try:
        page = new_page(browser, running.url)
        page.get_by_label("username").fill("dr.ana")
        page.get_by_label("password").fill("correct horse")
        page.get_by_role("button", name="Login").click()
        page.locator("#reader").get_by_text("dr.ana").wait_for()
        click_row(page, "DEMO-0003")
        page.locator("#study-images img").first.wait_for()
        # window/level on the full-bit-depth image, then zoom it with the wheel
        page.locator("#window-panel").get_by_text("Window / level").click()
        page.locator("#study-images img").first.click()
        wl = page.locator("#wl-image img")
        wl.wait_for()
        wl.hover()
        page.mouse.wheel(0, -300)
        page.wait_for_function("el => el.style.transform.includes('scale(1.2')",
                               arg=wl.element_handle())
        page.keyboard.press("Escape")
        page.locator("#draft-button").click()
        findings = page.locator("#edit-findings textarea")
        page.wait_for_function("el => el.value.length > 20", arg=findings.element_handle())
        findings.fill("Edited by the reader: <b>no</b> pleural effusion.")
        page.keyboard.press("Control+s")
        page.locator("#save-status").get_by_text("findings saved as revision 1").wait_for()
        # reload: the reader comes back to the study being worked on, edit intact and escaped
        page.reload()
        page.locator("#study-header").get_by_text("DEMO-0003").wait_for()
        page.wait_for_function("el => el.value.startsWith('Edited by the reader')",
                               arg=page.locator("#edit-findings textarea").element_handle())
        assert page.locator("#study-header b").count() == 0
        # rate with the ReXVal taxonomy
        page.locator("#likert").get_by_text("3", exact=True).click()
        page.locator("#rexval-missing_finding-significant input").fill("1")
        page.locator("#comment textarea").fill("misses the effusion")
        page.locator("#rate").click()
        page.locator("#rate-status").get_by_text("Rated (#1").wait_for()
        # the metrics panel shows draft/final/reference comparisons
        panel = page.locator("#metrics-panel")
        panel.get_by_text("final vs reference").first.wait_for()
        assert "rougeL" in panel.inner_text()
        assert "unavailable" in page.locator("#metrics-notes").inner_text()
        DOCS.mkdir(exist_ok=True)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(DOCS / "workstation.png"), full_page=True)
        # the evaluation report, built and offered for download from the UI
        page.locator("#export").get_by_text("Export evaluation report").click()
        page.locator("#export-button").click()
        link = page.locator("#export-file a").first
        link.wait_for(timeout=60_000)
        with page.expect_download() as download:
            link.click()
        report = Path(download.value.path()).read_text()
        assert "Radiologist review" in report and "dr.ana" in report
        # keyboard: next unfinished study
        page.locator("body").click()
        page.keyboard.press("Alt+n")
        page.wait_for_function(
            "() => !document.querySelector('#study-header').innerText.includes('DEMO-0003')")
        with sqlite3.connect(db) as con:
            (text,) = con.execute("SELECT text FROM revision ORDER BY id DESC LIMIT 1").fetchone()
            (errors,) = con.execute("SELECT errors FROM rating").fetchone()
        assert text == "Edited by the reader: <b>no</b> pleural effusion."
        assert '"missing_finding": {"significant": 1' in errors
    finally:
        running.stop()


def test_two_tabs_on_one_study_never_overwrite_each_other(browser, app):
    tabs = [new_page(browser, app.url) for _ in range(2)]
    for tab in tabs:
        tab.wait_for_selector("#worklist")
        click_row(tab, "DEMO-0004")
    first, second = tabs
    first.locator("#edit-impression textarea").fill("Tab one impression.")
    first.locator("#save").click()
    first.locator("#save-status").get_by_text("impression saved as revision 1").wait_for()
    second.locator("#edit-impression textarea").fill("Tab two impression.")
    second.locator("#save").click()
    status = second.locator("#save-status")
    status.get_by_text("Not saved").wait_for()
    assert "Tab one impression." in status.inner_text()
    with sqlite3.connect(app.db) as con:
        rows = con.execute("SELECT text FROM revision WHERE section = 'impression'").fetchall()
    assert rows == [("Tab one impression.",)]
