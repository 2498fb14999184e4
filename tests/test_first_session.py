"""What a new user meets in the first minute, in headless Chromium against the real app (found
by a new-user trial): the first load says something true while it runs, the study that opens
first is already drafted, the enlarged view shows an image at once, and a reload never shows
the reader's own late autosave as another tab's save."""

from __future__ import annotations

import pytest

from tests.browser import App, new_page, wait_value

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


def test_the_first_load_never_claims_an_empty_worklist(browser, app):
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


def test_an_empty_worklist_says_so(browser, tmp_path):
    running = App(tmp_path / "empty.sqlite", "--no-demo", "--no-predraft")
    try:
        page = browser.new_page(viewport={"width": 1366, "height": 768})
        page.goto(running.url)
        page.wait_for_function(
            "() => /No studies on your worklist/.test("
            "document.getElementById('progress')?.innerText)", timeout=60_000)
        assert "empty" in page.locator("#save-status").inner_text()
    finally:
        running.stop()


def test_the_study_that_opens_first_is_drafted_first(browser, app):
    """The first study on screen shows its draft at once, and it was the first one drafted:
    the app queued it at start, before the studies after it."""
    page = new_page(browser, app.url, 1366, 768)
    opened = int(page.locator("#film .current").get_attribute("data-study") or 0)
    wait_value(page, "findings", "v.length > 20", timeout=30_000)
    assert "Showing the draft" in page.locator("#save-status").inner_text()
    assert page.locator("#draft-button").inner_text() == "Regenerate"
    first = app.query("SELECT study_id FROM draft WHERE error IS NULL ORDER BY id LIMIT 1")
    assert first == [(opened,)]


def test_the_enlarged_view_shows_the_preview_at_once_then_the_full_image(browser, app):
    """A click on the film puts the film's own (loaded) preview over the whole enlarged view in
    the same event, before any answer from the server; the full-resolution, window-levelled
    image then takes its place, with no spinner in between."""
    page = new_page(browser, app.url, 1366, 768)
    page.wait_for_function("() => { const i = document.querySelector('#film .current img');"
                           " return i && i.complete && i.naturalWidth > 0; }")
    at_click = page.evaluate("""() => {
      const film = document.querySelector('#film .current [data-index] img');
      film.click();  // the handler runs now; nothing from the server can have arrived
      const p = document.querySelector('#wl-preview');
      if (!p) return null;
      const r = p.getBoundingClientRect();
      return {display: getComputedStyle(p).display, same: p.src === (film.currentSrc || film.src),
              area: r.width * r.height / (innerWidth * innerHeight),
              full: !!document.querySelector('#wl-image img')}; }""")
    assert at_click is not None, "no preview was shown at the click"
    assert at_click["display"] == "block" and at_click["same"], at_click
    assert at_click["area"] > 0.7 and not at_click["full"], at_click
    # the full image replaces it; the preview is gone
    page.wait_for_function("""() => { const i = document.querySelector('#wl-image img');
      const p = document.querySelector('#wl-preview');
      return i && i.complete && i.naturalWidth > 0 && getComputedStyle(p).display === 'none'; }""")
    sizes = page.evaluate("""() => [document.querySelector('#wl-image img').naturalWidth,
      document.querySelector('#film .current img').naturalWidth]""")
    assert sizes[0] >= sizes[1] > 0, sizes
    # → to the next image (this study has one: the same again) shows and clears it too
    page.keyboard.press("ArrowRight")
    page.wait_for_function("() => getComputedStyle(document.querySelector('#wl-preview'))"
                           ".display === 'none'")
    page.keyboard.press("Escape")
    page.locator("#enlarged").wait_for(state="hidden")
