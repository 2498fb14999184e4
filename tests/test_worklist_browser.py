"""The worklist panel in headless Chromium (Debian's package): search, paging, row click and
Next on a real Gradio app over a real SQLite file."""

from __future__ import annotations

import re

import pytest

from bench.synthetic import SyntheticImage, add_studies
from rrg_review.app.accounts.service import AccountService
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.panel import build_worklist_panel
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
    # named for a screen reader by what it does (it was "Textbox": a new-user trial), as is
    # the page number box
    assert page.get_by_role("textbox", name="Search the worklist").count() == 1
    assert page.get_by_label("Worklist page", exact=True).count() == 1
    search.fill("CXR2")
    search.press("Enter")
    wait_for_label(page, r"1-10 of 11")
    assert study_column(page) == ["CXR2", *[f"CXR{i}" for i in range(20, 29)]]
    page.locator("#worklist-next-page").click()
    wait_for_label(page, r"11-11 of 11")
    assert study_column(page) == ["CXR29"]

    # the end of a key no key starts with: the keys that contain it, and the list says so
    search.fill("r2")
    search.press("Enter")
    wait_for_label(page, r"1-10 of 11")
    assert study_column(page) == ["CXR2", *[f"CXR{i}" for i in range(20, 29)]]
    assert "No key on your list starts with r2:" in page.locator("#worklist-message").inner_text()

    search.fill("%'_")
    search.press("Enter")
    wait_for_label(page, r"No study matches")
    assert "No key on your list" not in page.locator("#worklist-message").inner_text()

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


LONG_KEY = "anon-44e5c0a047d1e2f3"


@pytest.fixture
def big_ids_app(db):
    """The panel in the workstation's left column (its scale and minimum width, the page's own
    styles) on 3,200 studies with 6-digit ids and keys like ReXGradient's ("CXR15995/1"): at one
    row per page the last page is 3,200, as 160,000 studies give at 50 a page."""
    import os

    import gradio as gr
    from sqlalchemy import text

    from rrg_review.app.page import launch_options
    from tests.browser import free_port

    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} not installed (make test installs Debian's chromium)")
    (pad,) = add_studies(db, 1, prefix="PAD")  # report only: not on a worklist
    with db.engine.begin() as conn:  # the next study ids are 6 digits long
        conn.execute(text("DELETE FROM reference_report WHERE study_id = :s"), {"s": pad})
        conn.execute(text("UPDATE study SET id = 159989 WHERE id = :s"), {"s": pad})
    add_studies(db, 3200, start=15995, image=SyntheticImage(rg1(), 1955, 1841))
    with db.engine.begin() as conn:
        conn.execute(text("UPDATE study SET study_key = study_key || '/1' "
                          "WHERE study_key LIKE 'CXR%'"))
        # a pseudonymous key as long as the store makes them ("anon-" + 16 hex digits)
        conn.execute(text(f"UPDATE study SET study_key = '{LONG_KEY}' "
                          "WHERE study_key = 'CXR15995/1'"))
    reader = AccountService(db).add("alice", None)
    worklists = WorklistService(db)
    worklists.assign(reader)
    with gr.Blocks() as ui:
        with gr.Row(elem_id="main-row", equal_height=False):
            with gr.Column(scale=2, min_width=250, elem_id="worklist-col"):
                panel = build_worklist_panel(worklists, page_size=1)
            with gr.Column(scale=6, min_width=480):
                gr.Markdown("film")
            with gr.Column(scale=3, min_width=380):
                gr.Markdown("editor")
        panel.connect(ui, gr.State(None), lambda request: reader, None, [], navigation=False)
    port = free_port()
    options = launch_options()  # the page's styles and script (it titles the keys)
    ui.launch(server_port=port, prevent_thread_lock=True, css=options["css"],
              head=options["head"])
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        ui.close()


def test_six_digit_ids_and_long_keys_stay_on_one_line_at_1366(big_ids_app, page):
    """Issue #21, defect 6: at 160,000 studies and 1366 px the ids wrapped one digit per line,
    keys like "CXR15995/1" wrapped, rows were ~140 px tall, and the page box showed "3" for
    page 3,200."""
    page.set_viewport_size({"width": 1366, "height": 768})
    page.goto(big_ids_app)
    wait_for_label(page, r"1-1 of 3,200")
    # a long key (cut off at "anon-44e5c0a047…" in a new-user trial) is readable whole: it
    # wraps within its column, every line fits, and the cell's tooltip holds it
    key = page.locator('#worklist .body-cell[data-col="1"]').filter(has_text="anon-").first
    page.wait_for_function("k => [...document.querySelectorAll('#worklist .body-cell')]"
                           ".some(c => c.title === k)", arg=LONG_KEY)
    got = key.evaluate("""c => { const t = c.querySelector('span') || c;
        return {text: c.innerText.replace(/\\s/g, ''), title: c.title,
                fits: t.scrollWidth <= c.clientWidth + 1,
                height: c.getBoundingClientRect().height}; }""")
    assert got["text"] == LONG_KEY and got["title"] == LONG_KEY and got["fits"], got
    assert got["height"] < 40, got  # two lines at most
    page.locator("#worklist-last").click()
    wait_for_label(page, r"page 3,200 / 3,200")
    page.wait_for_function("() => document.querySelector('#worklist-page input').value"
                           " === '3200'")
    cells = page.evaluate("""() => [...document.querySelectorAll('#worklist .body-cell')]
        .filter(c => c.innerText.trim()).map(c => {
          const text = c.querySelector('span') || c;
          const range = document.createRange(); range.selectNodeContents(text);
          return {col: c.dataset.col, text: c.innerText.trim(),
                  lines: range.getClientRects().length, height: c.getBoundingClientRect().height,
                  fits: text.scrollWidth <= c.clientWidth + 1}; })""")
    assert {c["text"] for c in cells if c["col"] in "01"} >= {"163189", "CXR19194/1"}, cells
    for c in cells:
        assert c["lines"] == 1 and c["fits"], c  # one line, never cut off
        assert c["height"] < 32, c
    box = page.evaluate("""() => { const i = document.querySelector('#worklist-page input');
        return {fits: i.scrollWidth <= i.clientWidth, width: i.clientWidth}; }""")
    assert box["fits"], box  # "3200" whole in the page box
