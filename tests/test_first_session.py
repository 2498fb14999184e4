"""What a new user meets in the first minute, in headless Chromium against the real app (found
by a new-user trial): the first load says something true while it runs, the study that opens
first is already drafted, the enlarged view shows an image at once, and a reload never shows
the reader's own late autosave as another tab's save."""

from __future__ import annotations

import pytest

from tests.browser import (
    ApiGate,
    App,
    answer_never_comes,
    close_pages,
    demo_copy,
    new_page,
    pump_until,
    wait_value,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]
pytest_plugins = ["tests.browser"]  # the browser and app fixtures

# every text the progress line ever shows, recorded from before the page's first script runs
RECORD_PROGRESS = """
window.__progressSeen = [];
new MutationObserver(() => {
  const el = document.getElementById('progress');
  const text = el ? el.innerText.trim() : null;
  const seen = window.__progressSeen;
  if (text !== null && seen[seen.length - 1] !== text) seen.push(text);
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def load_event_seconds(page) -> float:
    """The server's time to answer the page load's own events (the worklist's and the
    study's): the slowest time to first byte among them, from the browser's resource timing."""
    return page.evaluate(
        "() => Math.max(0, ...performance.getEntriesByType('resource')"
        ".filter(e => /gradio_api\\/(run\\/predict|queue\\/join)/.test(e.name))"
        ".slice(0, 2).map(e => e.responseStart - e.requestStart)) / 1000")


def test_the_first_load_never_claims_an_empty_worklist(browser, tmp_path, database_templates):
    """... and the first page of a fresh server is as quick as the next (issue #21, defect 7:
    the first page's events paid 1.5-2.5 s of first-use work under load, matplotlib imported
    by Gradio's per-event backend switch above all; app/warmup.py does it at start). The app
    is `launch.py` in a new interpreter: a fork of the tests' pre-imported server would have
    that work done already."""
    app = App(demo_copy(database_templates, tmp_path / "first.sqlite"), fresh=True)
    try:
        _first_load_checks(browser, app)
    finally:
        app.stop(close_first=lambda: close_pages(browser))


def _first_load_checks(browser, app: App) -> None:
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    page.add_init_script(RECORD_PROGRESS)
    page.goto(app.url)
    page.locator("#film [data-study]").first.wait_for(timeout=60_000)
    page.wait_for_function("() => /done/.test(document.getElementById('progress').innerText)")
    seen = page.evaluate("window.__progressSeen")
    assert not [t for t in seen if "No studies" in t], seen
    assert any("Loading" in t for t in seen), seen  # something true while it loads
    (total,) = app.query("SELECT count(*) FROM worklist_item")[0]
    assert total > 0 and f"0 / {total} done" in seen[-1], seen
    first = load_event_seconds(page)
    page.wait_for_function(  # the first page's follow-up (the metrics) done: a quiet server
        "() => !document.querySelector('#metrics-notes').innerText.includes('Computing')")
    again = browser.new_page(viewport={"width": 1366, "height": 768})
    again.goto(app.url)
    again.locator("#film [data-study]").first.wait_for(timeout=60_000)
    second = load_event_seconds(again)
    print(f"load events answered in {first:.2f} s on the first page, {second:.2f} s on the next")
    assert first <= 2 * second + 0.4, (first, second)
    # Gradio's front-end files come from memory, and the browser keeps the hashed ones
    asset = again.evaluate("() => performance.getEntriesByType('resource')"
                           ".map(e => e.name).find(n => n.includes('/assets/'))")
    answer = again.request.get(asset)
    assert answer.headers.get("cache-control") == "public, max-age=31536000, immutable"


def test_an_empty_worklist_says_so(browser, tmp_path):
    running = App(tmp_path / "empty.sqlite", "--no-demo", "--no-predraft")
    try:
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.goto(running.url)
        page.wait_for_function(
            "() => /No studies on your worklist/.test("
            "document.getElementById('progress')?.innerText)", timeout=60_000)
        # (the study column's own load may still be running: waited for, not read at once)
        page.wait_for_function("() => /empty/.test("
                               "document.querySelector('#save-status')?.innerText)")
    finally:
        running.stop()


def test_a_worklist_with_every_study_done_says_so(browser, app):
    """A new-user trial rated every study, reloaded, and read "Your worklist is empty." beside
    four done studies."""
    app.query("UPDATE worklist_item SET status = 'done'")
    (total,) = app.query("SELECT count(*) FROM worklist_item")[0]
    page = browser.new_page(viewport={"width": 1366, "height": 768})
    page.goto(app.url)
    page.wait_for_function(
        f"() => /All {total} studies on your worklist are done/.test("
        "document.querySelector('#save-status')?.innerText)", timeout=60_000)
    assert "empty" not in page.locator("#save-status").inner_text()
    # with no study open the boxes take no typing (it belonged to no study, and a row click
    # dropped it without a word: a new-user trial); a row opens one, and they take it again
    page.wait_for_function("() => document.querySelector('#edit-findings textarea').disabled")
    assert page.locator("#edit-impression textarea").is_disabled()
    page.get_by_text("DEMO-0002", exact=True).filter(visible=True).first.click()
    page.locator("#film-head").get_by_text("DEMO-0002").wait_for()
    page.wait_for_function("() => !document.querySelector('#edit-findings textarea').disabled")


def test_the_study_that_opens_first_is_drafted_first(browser, tmp_path, database_templates):
    """The first study on screen shows its draft at once, and it was the first one drafted:
    the app queued it at start, before the studies after it. (Its own app on undrafted demo
    studies: the `app` fixture's are drafted already.)"""
    app = App(demo_copy(database_templates, tmp_path / "undrafted.sqlite"))
    try:
        page = new_page(browser, app.url, 1366, 768)
        opened = int(page.locator("#film .current").get_attribute("data-study") or 0)
        wait_value(page, "findings", "v.length > 20", timeout=30_000)
        assert "Showing the draft" in page.locator("#save-status").inner_text()
        assert page.locator("#draft-button").inner_text() == "Regenerate"
        first = app.query("SELECT study_id FROM draft WHERE error IS NULL ORDER BY id LIMIT 1")
        assert first == [(opened,)]
    finally:
        app.stop(close_first=lambda: close_pages(browser))


def test_the_enlarged_view_shows_the_preview_at_once_then_the_full_image(browser, app):
    """A click on the film draws the film's own (loaded) preview on the enlarged view's canvas
    in the same event, before any answer from the server, with the caption and no placeholder
    window values; the full-bit-depth image then takes its place."""
    page = new_page(browser, app.url, 1366, 768)
    page.wait_for_function("() => { const i = document.querySelector('#film .current img');"
                           " return i && i.complete && i.naturalWidth > 0; }")
    at_click = page.evaluate("""() => {
      const film = document.querySelector('#film .current [data-index] img');
      film.click();  // the handler runs now; nothing from the server can have arrived
      const c = document.querySelector('#wl-canvas');
      if (!c) return null;
      const px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let lit = 0;
      for (let i = 0; i < px.length; i += 4) if (px[i] > 0) lit += 1;
      return {width: c.width, film: film.naturalWidth, lit, full: window.rrgViewer.full,
              caption: document.querySelector('#wl-caption').innerText,
              level: document.querySelector('#wl-center').value}; }""")
    assert at_click is not None, "no canvas at the click"
    assert at_click["width"] == at_click["film"] and at_click["lit"] > 1000, at_click
    assert not at_click["full"] and "Patient" in at_click["caption"], at_click
    assert at_click["level"] == "", at_click  # no placeholder that jumps to the real value
    page.wait_for_function("() => window.rrgViewer.full")
    sizes = page.evaluate("""() => [document.querySelector('#wl-canvas').width,
      document.querySelector('#film .current img').naturalWidth]""")
    assert sizes[0] >= sizes[1] > 0, sizes
    assert page.locator("#wl-center").input_value() != ""
    # one image: ◀ image ▶ are off (they did nothing a trial could see), → reopens it
    assert page.locator("#next-image").is_disabled() and page.locator("#prev-image").is_disabled()
    # → to the next image (this study has one: the same again) loads it too
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => window.rrgViewer.full")
    page.keyboard.press("Escape")
    page.locator("#enlarged").wait_for(state="hidden")


def test_a_reloaded_page_knows_its_own_late_autosave(browser, app):
    """The old page saved part of what the reader typed, but that request reaches the server
    only after the reloaded page has loaded and restored the whole text (a slow request
    outliving the reload). The reloaded page's save then meets a newer revision holding a text
    this tab sent itself: no "saved elsewhere" conflict, nothing asked; the whole text is
    saved on top and the reader goes on."""
    import json
    import urllib.request

    from tests.browser import box, click_row, wait_text

    page = new_page(browser, app.url)
    click_row(page, "DEMO-0003")
    page.on("dialog", lambda dialog: dialog.accept())
    part, tail = "The reader's own impression,", " typed on after the autosave."
    caught: list[tuple[str, bytes, dict]] = []
    seen: list[str] = []  # (what the page sent, shown when the save never comes)

    def catch(route) -> bool:
        """The old page's save of `part` is kept for later; nothing with the text leaves."""
        request = route.request
        body = request.post_data or ""
        seen.append(f"{request.method} {request.url.rsplit('/', 2)[-2:]} {body[:300]}")
        if request.method == "POST" and part in body:
            if json.dumps(part) in body:  # (its input events too: replayed, harmless)
                caught.append((request.url, request.post_data_buffer or b"",
                               {"Content-Type": request.headers.get("content-type", "")}))
            answer_never_comes(route)
            return True
        return False

    # (one gate for the test: taking a route away sends on what it holds)
    gate = ApiGate(page)
    gate.rule = catch
    box(page, "impression").click()
    page.keyboard.press("Control+a")
    page.keyboard.type(part)
    page.keyboard.press("Control+s")
    # (the save carries the page's client report, with its edit counter "seq")
    pump_until(page, lambda: any(b"seq" in body for _, body, _ in caught), "the old page's save",
               detail=lambda: {"box": box(page, "impression").input_value(),
                               "status": page.locator("#save-status").inner_text(),
                               "sent": seen[-12:]})
    # at a reader's pace, so that an autosave tick (every 4 s) comes while the tail is typed:
    # held like the rest, it must never reach the server (a CI run stored one, "...after the
    # au", when the test took its route away before the reload)
    page.keyboard.type(tail, delay=150)
    held: list = []

    def hold(route) -> bool:  # the reloaded page's requests with the text wait their turn
        request = route.request
        if request.method == "POST" and part in (request.post_data or ""):
            held.append(route)
            return True
        return False

    gate.rule = hold  # (what the old page holds is dropped by the reload)
    page.reload()
    page.locator("#film .current").wait_for()
    wait_text(page, "restore-note", "Restored")
    pump_until(page, lambda: held, "the restored text's requests")
    answers = [urllib.request.urlopen(  # now the old page's save arrives and is stored
        urllib.request.Request(url, data=body, headers=headers), timeout=60).read().decode()
        for url, body, headers in caught]
    assert latest_text_of(app, "impression") == part, (
        [a[:200] for a in answers],
        app.query("SELECT number, autosave, text FROM revision WHERE section = 'impression' "
                  "ORDER BY number"))
    gate.rule = None
    for route in held:
        route.continue_()
    gate.remove()  # (the old page's held requests went with it)
    whole = part + tail

    def saved_or_refused() -> bool:
        status = page.locator("#save-status").inner_text()
        assert "not saved" not in status and "elsewhere" not in status, status
        return latest_text_of(app, "impression") == whole

    pump_until(page, saved_or_refused, "the whole text to be saved")
    page.wait_for_function("() => /saved/.test("
                           "document.querySelector('#save-status').innerText)")
    status = page.locator("#save-status").inner_text()
    assert "not saved" not in status and "elsewhere" not in status, status
    assert page.locator("#keep-mine").is_disabled()
    history = [t for (t,) in app.query("SELECT text FROM revision WHERE section = 'impression' "
                                       "ORDER BY number")]
    assert history[-2:] == [part, whole], history
    assert all(part.startswith(t) for t in history[:-2]), history  # ticks while typing
    # the reader goes on: the next save lands on top, without a conflict
    box(page, "impression").press("End")
    page.keyboard.type(" More.")
    page.keyboard.press("Control+s")
    # (on a loaded machine an autosave tick may store part of " More." first: the save is then
    # revision 4, not 3; the number on screen is the one stored last)
    pump_until(page, lambda: latest_text_of(app, "impression") == whole + " More.",
               "the next save")
    (last,) = app.query("SELECT max(number) FROM revision WHERE section = 'impression'")[0]
    assert last >= 3
    wait_text(page, "save-status", f"revision {last}")
    status = page.locator("#save-status").inner_text()
    assert "not saved" not in status and "elsewhere" not in status, status


def latest_text_of(app: App, section: str) -> str | None:
    rows = app.query("SELECT r.text FROM revision r JOIN study s ON s.id = r.study_id "
                     "WHERE s.study_key = 'DEMO-0003' AND r.section = ? "
                     "ORDER BY r.number DESC LIMIT 1", section)
    return rows[0][0] if rows else None
