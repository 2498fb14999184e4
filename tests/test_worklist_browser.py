"""The worklist panel in headless Chromium (Debian's package): search, paging, row click and
Next on a real Gradio app over a real SQLite file."""

from __future__ import annotations

import re

import pytest

from bench.synthetic import SyntheticImage, add_studies
from rrg_review.app.accounts.service import AccountService
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import WorklistService
from tests.browser import CHROMIUM, PatientBrowser, launch_browser
from tests.conftest import rg1
from tests.worklist_app import panel_app as launch_panel

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def panel_app(db):
    import os

    import gradio as gr

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (make test installs Debian's chromium)")
    image = SyntheticImage(rg1(), 1955, 1841)
    ids = add_studies(db, 30, image=image)
    alice = AccountService(db).add("alice", None)  # a new reader: no worklist yet
    worklists = WorklistService(db)

    def prepare(reader: int) -> None:  # what the workstation hands in: assign a new reader
        if not worklists.has_worklist(reader):
            worklists.assign(reader)

    def rate_button(panel, state, header) -> None:
        rate = gr.Button("Rate", elem_id="rate")

        def on_rate(session):  # stands in for the workstation's rate handler
            ReviewService(db).rate(alice, session.study, likert=4, acceptable=True)
            return "rated"

        panel.follow(rate.click(on_rate, [state], [header]))

    with launch_panel(db, alice, prepare_reader=prepare, extra=rate_button) as running:
        yield running.url, ids


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = PatientBrowser(launch_browser(p))
        yield browser.new_page(viewport={"width": 1400, "height": 1000})
        browser.close()


def study_column(page) -> list[str]:
    cells = page.locator('#worklist .body-cell[data-col="1"]').all_inner_texts()
    return [c.strip() for c in cells if c.strip()]


def wait_for_label(page, pattern: str) -> None:
    page.wait_for_function(
        "p => new RegExp(p).test(document.querySelector('#worklist-page-label')?.innerText "
        "|| '')", arg=pattern, timeout=20_000)


def test_search_paging_row_click_and_next_in_chromium(panel_app, page):
    url, ids = panel_app
    page.goto(url)
    wait_for_label(page, r"1-10 of 30")
    assert study_column(page) == [f"CXR{i}" for i in range(1, 11)]  # natural order
    assert "0 / 30 done" in page.locator("#progress").inner_text()

    search = page.locator("#worklist-search textarea, #worklist-search input").first
    search.fill("CXR2")
    search.press("Enter")
    wait_for_label(page, r"1-10 of 11")
    assert study_column(page) == ["CXR2", *[f"CXR{i}" for i in range(20, 29)]]
    page.locator("#worklist-next-page").click()
    wait_for_label(page, r"11-11 of 11")
    assert study_column(page) == ["CXR29"]

    search.fill("%'_")
    search.press("Enter")
    wait_for_label(page, r"No study matches")

    search.fill("")
    search.press("Enter")
    wait_for_label(page, r"1-10 of 30")
    page.locator('#worklist .body-cell[data-col="1"]').filter(
        has_text=re.compile(r"^\s*CXR5\s*$")).click()
    page.wait_for_function(
        "t => document.querySelector('#opened')?.innerText.includes(t)",
        arg=f"opened {ids[4]}", timeout=20_000)
    page.locator("#next-study").click()
    page.wait_for_function(
        "t => document.querySelector('#opened')?.innerText.includes(t)",
        arg=f"opened {ids[5]}", timeout=20_000)
    # a rating refreshes the progress and the rows in a follow-up event
    page.locator("#rate").click()
    page.wait_for_function(
        "() => document.querySelector('#progress')?.innerText.includes('1 / 30 done')",
        timeout=20_000)
    assert "done" in page.locator('#worklist .body-cell[data-row="5"][data-col="2"]').inner_text()
