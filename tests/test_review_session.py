"""A review session as a hurried radiologist runs it, in headless Chromium against the real app:
nothing typed is lost (Alt+N, a click, a reload, with no wait), nothing of the previous patient
stays on screen, review data means what it says, and the reading-room layout holds at three
screen sizes."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from typing import Any, NamedTuple

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from rrg_review.app.fair import SLOW_DOWN
from tests.browser import (
    ApiGate,
    App,
    answer_never_comes,
    box,
    click_row,
    demo_copy,
    new_page,
    press_draft,
    pump_until,
    top_in_column,
    wait_in_view,
    wait_text,
    wait_until,
    wait_value,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]
pytest_plugins = ["tests.browser"]  # the browser and app fixtures


def latest_text(app: App, key: str, section: str) -> str | None:
    rows = app.query("SELECT r.text FROM revision r JOIN study s ON s.id = r.study_id "
                     "WHERE s.study_key = ? AND r.section = ? ORDER BY r.number DESC LIMIT 1",
                     key, section)
    return rows[0][0] if rows else None


def status_of(app: App, key: str) -> tuple[str, float]:
    (row,) = app.query("SELECT w.status, w.active_seconds FROM worklist_item w "
                       "JOIN study s ON s.id = w.study_id WHERE s.study_key = ?", key)
    return row


def key_on_screen(page) -> str:
    """The study key in the film heading."""
    import re

    found = re.search(r"Study (\S+)", page.locator("#film-head").inner_text())
    assert found, page.locator("#film-head").inner_text()
    return found.group(1)


def open_key(page) -> str:
    return page.locator("#film .current").get_attribute("data-study") or ""


def type_into(page, section: str, text: str) -> None:
    """Replace a box's text by typing it, as a reader does (real key events, no delay)."""
    box(page, section).click()
    page.keyboard.press("Control+a")
    page.keyboard.type(text)


def wait_on_study(page, key: str, what: str) -> None:
    """Wait until the page shows study `key`; else fail saying where it is and what its status
    line says (a CI run's steps stopped short with nothing more to go on)."""
    try:
        wait_until(lambda: key_on_screen(page) == key, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; on {key_on_screen(page)}, saying "
                             f"{page.locator('#save-status').inner_text()!r}; the page's "
                             f"steps: {page.evaluate('() => window.rrg.stepLog')}") from None


def test_typed_text_survives_alt_n_a_worklist_click_and_a_reload_with_no_wait(browser, app):
    page = new_page(browser, app.url)
    joins: list[str] = []  # what the page sent (said when a round's text was not saved)
    page.on("request", lambda r: joins.append(r.post_data or "")
            if r.method == "POST" and "/queue/join" in r.url else None)
    click_row(page, "DEMO-0001")
    for i in range(4):  # back and forth: type, then at once Alt+N / Alt+P
        key = key_on_screen(page)  # the list is in natural key order: 0001 then 0002
        before = open_key(page)
        text = f"Typed then Alt+{'N' if i % 2 == 0 else 'P'} at once, round {i}."
        type_into(page, "findings", text)
        column = "document.querySelector('#editor-col')"
        if i == 1:  # the editor column scrolled down (to the ReXVal rows) before leaving
            page.evaluate(f"() => {{ {column}.scrollTop = 10000; }}")
            assert page.evaluate(f"() => {column}.scrollTop") > 0
        page.keyboard.press("Alt+n" if i % 2 == 0 else "Alt+p")
        page.wait_for_function(f"() => document.querySelector('#film .current')"
                               f".dataset.study !== '{before}'")
        # the next study starts at the top of the column (its status line, its draft: a
        # new-user trial saw the last study's ReXVal rows instead)
        page.wait_for_function(f"() => {column}.scrollTop === 0", timeout=30_000)
        # saved in the same request (else the history says what was stored, and when)
        assert latest_text(app, key, "findings") == text, (app.query(
            "SELECT r.number, r.text, r.autosave, r.created_at FROM revision r JOIN study s "
            "ON s.id = r.study_id WHERE s.study_key = ? AND r.section = 'findings' "
            "ORDER BY r.number", key), [j[:300] for j in joins if text in j])
        # the boxes take keys again once they show the new study (the film may come first)
        page.wait_for_function("() => !document.body.classList.contains('rrg-leaving')")
        # the next study's status line first says that the text left behind is kept, with
        # its number (stored by the move, or by an autosave tick just before it)
        ((number,),) = app.query(
            "SELECT max(r.number) FROM revision r JOIN study s ON s.id = r.study_id "
            "WHERE s.study_key = ? AND r.section = 'findings'", key)
        status = page.locator("#save-status").inner_text()
        assert f"Your edits to {key} are saved (findings revision {number}" in status, status
    # a click on another study of the worklist, right after typing
    click_row(page, "DEMO-0003")
    type_into(page, "impression", "Typed then a worklist click.")
    click_row(page, "DEMO-0002")
    assert latest_text(app, "DEMO-0003", "impression") == "Typed then a worklist click."
    # back on it, the text is on screen
    click_row(page, "DEMO-0003")
    wait_value(page, "impression", "v === 'Typed then a worklist click.'")


def test_a_reload_after_a_quick_alt_n_stays_on_the_study_on_screen(browser, app):
    """Found by a new-user trial: text typed then Alt+N within a second was saved with the
    move, but this browser kept it as "unsaved", so a reload reopened the previous patient
    instead of the one on screen and offered to restore text that was saved already."""
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0002")
    for n in range(3):  # a quick run of Alt+N / Alt+P, typing in each study
        before = open_key(page)
        box(page, "findings").click()
        page.keyboard.press("Control+End")
        page.keyboard.type(f" Quick-{n}.")
        page.keyboard.press("Alt+n" if n % 2 == 0 else "Alt+p")
        page.wait_for_function(f"() => document.querySelector('#film .current')"
                               f".dataset.study !== '{before}'")
        page.wait_for_function("() => !document.body.classList.contains('rrg-leaving')")
    on_screen = key_on_screen(page)
    assert latest_text(app, "DEMO-0002", "findings").endswith(" Quick-0. Quick-2.")
    wait_until(lambda: page.evaluate("() => Object.keys(localStorage).filter("
                                     "k => k.startsWith('rrg:')).length") == 0,
               "no study kept as unsaved in this browser")
    page.reload()
    page.locator("#film [data-study]").first.wait_for()
    page.wait_for_timeout(1000)  # a restore would have opened by now
    assert key_on_screen(page) == on_screen
    assert "Restore" not in page.locator("#restore-note").inner_text()


def revisions(app: App, key: str, section: str) -> list[str]:
    return [r[0] for r in app.query(
        "SELECT r.text FROM revision r JOIN study s ON s.id = r.study_id "
        "WHERE s.study_key = ? AND r.section = ? ORDER BY r.number", key, section)]


def test_keys_pressed_while_the_next_study_opens_reach_neither_patient(browser, app):
    """Found by a new-user trial: typing on through Alt+N once put the next patient's findings
    into the previous study. From the key until the next study is on screen the boxes take
    no keystrokes; each study keeps only its own text, through leaving and coming back."""
    page = new_page(browser, app.url)
    theirs, mine = "Patient B: right lower lobe opacity.", "Patient A: clear lungs."
    for key, text in (("DEMO-0003", theirs), ("DEMO-0002", mine)):  # drafted or not
        click_row(page, key)
        type_into(page, "findings", text)
        page.keyboard.press("Control+s")
        wait_until(lambda k=key, t=text: latest_text(app, k, "findings") == t, f"{key} saved")
    for n in range(3):
        box(page, "findings").click()
        page.keyboard.press("Control+End")
        page.keyboard.type(f" R{n}")
        before = open_key(page)
        page.keyboard.press("Alt+n")
        for i in range(25):  # a reader typing on while the next study loads (no digits:
            # on a machine that stalls the test's own keys, a digit is rightly taken as a
            # score, and the unsent score then holds the row click below, as it should)
            page.keyboard.type(f"<{'abc'[n]}.{chr(97 + i)}>")
            page.wait_for_timeout(30)
        page.wait_for_function(f"() => document.querySelector('#film .current')"
                               f".dataset.study !== '{before}'")
        page.wait_for_timeout(1000)
        click_row(page, "DEMO-0002")  # back, through the restore of unsaved text
        wait_value(page, "findings", f"v.endsWith(' R{n}')")
    # on screen now; in the database once the leave's save or, when the last keys reached
    # the box after Alt+N read it (a loaded machine), the restored text's save has landed
    wait_until(lambda: latest_text(app, "DEMO-0002", "findings") == mine + " R0 R1 R2",
               "the last words to be saved")
    # (an autosave may have caught the first typing part way: a prefix of the reader's text)
    assert all((t.startswith(mine) or mine.startswith(t)) and "<" not in t
               for t in revisions(app, "DEMO-0002", "findings"))
    assert all((t.startswith(theirs) or theirs.startswith(t)) and "Patient A" not in t
               for t in revisions(app, "DEMO-0003", "findings"))


def test_keys_typed_on_through_alt_n_land_in_no_patients_report(browser, app):
    """Found in a new-user trial (3 of 3): a reader finishing a sentence after Alt+N had its
    last words appended to the next patient's findings (and autosaved there) once that study
    was on screen. The cursor now leaves the box with the study; keys typed on go nowhere,
    set no score, and the page says so."""
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0001")
    type_into(page, "findings", "Typed for the first patient.")
    page.evaluate("""() => { window.keyTimes = [];
      document.addEventListener('keydown', (e) => window.keyTimes.push(e.timeStamp), true); }""")
    page.keyboard.press("Alt+n")
    page.keyboard.type("and more words 12345 for the first patient", delay=40)
    wait_until(lambda: key_on_screen(page) != "DEMO-0001", "the next study")
    time.sleep(1.5)  # an autosave tick or two
    assert "first patient" not in box(page, "findings").input_value()
    # no score from the digits typed on, if they came as a reader types on: a machine so busy
    # that the test's own driver stalled a second between two keys sends keystrokes the page
    # rightly takes as new (a run beside two busy processes, load 15, did)
    gap = page.evaluate("() => Math.max(0, ...window.keyTimes.slice(1).map("
                        "(t, i) => t - window.keyTimes[i]))")
    if gap < 900:
        assert page.locator("#likert input:checked").count() == 0, gap
    wait_text(page, "restore-note", "not typed into this one")
    if gap < 900:  # it quotes them, to be typed again where they belong (a new-user trial)
        assert "(“and more words 12345 for the first patient”)" in page.locator(
            "#restore-note").inner_text()
    assert latest_text(app, "DEMO-0001", "findings") == "Typed for the first patient."
    stray = app.query("SELECT COUNT(*) FROM revision WHERE text LIKE '%more words%'")
    assert stray == [(0,)]
    # after a pause, a click in the box types in this study as usual
    page.wait_for_timeout(1100)
    type_into(page, "findings", "Now for this patient.")
    wait_until(lambda: latest_text(app, key_on_screen(page), "findings")
               == "Now for this patient.", "the new study's text to be saved")
    # and the note has done its work: it stood over the reader's typing (a new-user trial)
    assert "not typed into this one" not in page.locator("#restore-note").inner_text()
    # A request names the study of the values Gradio gathered for it, not the page's #sync as
    # last drawn: Gradio sets an answer's values at once and draws them a moment later, and a
    # row click held back while the last one was on its way goes out in between (a race
    # script sent DEMO-0003's draft as DEMO-0001's text so; a new-user trial found DEMO-0002's
    # draft autosaved into DEMO-0003). Values not yet drawn have had no keystroke.
    drawn, other, same = page.evaluate("""() => {
      const drawn = JSON.parse(document.querySelector('#sync textarea').value);
      const ask = (sync) => JSON.parse(window.rrgWithClient(
        ['a text', JSON.stringify(sync), '{}'], 3, 2, {findings: 0}, 1)[2]);
      return [drawn.study, ask({...drawn, study: -7}), ask(drawn)];
    }""")
    assert other["study"] == -7 and other["keys"] == {}, other
    assert same["study"] == drawn and "findings" in same["keys"], same
    # the note does not come back on the next study opened (keys typed on after the last one
    # had landed brought it back there: a new-user trial)
    click_row(page, "DEMO-0001")
    page.wait_for_timeout(300)  # (a poll of the page script)
    assert "not typed into this one" not in page.locator("#restore-note").inner_text()
    # the note lies over the column and moves no button (at 1366x768 it pushed Submit rating
    # below the fold: a new-user trial); its close button puts it away
    box(page, "findings").click()
    page.keyboard.press("Alt+n")
    page.keyboard.type("and on", delay=40)
    wait_text(page, "restore-note", "not typed into this one")
    with_note = page.locator("#save").bounding_box()["y"]
    page.locator("#restore-note .rrg-close").click()
    page.wait_for_function("() => !document.querySelector('#restore-note .rrg-restore')")
    assert abs(page.locator("#save").bounding_box()["y"] - with_note) < 1


def test_a_draft_landing_while_the_reader_types_takes_none_of_the_keys(browser, app):
    """Found beside two busy processes: a reader opened a study whose draft was still being
    made and typed at once; the draft's answer (the server fills the boxes only when they
    hold no text of the reader's, judged by the boxes as they were when its request left)
    landed mid-word over the typing, and the stored text was the draft's impression plus
    "ssion.". Made certain here: the draft's request is held until the reader has typed, then
    it lands. Every key stays; the draft is beside the text, and the untyped box gets it."""
    page = new_page(browser, app.url)
    wait_until(lambda: app.query("SELECT count(DISTINCT study_id) FROM draft") == [(4,)],
               "the pre-drafter done with the demo")
    # a study whose draft is not made yet (as one imported while the app runs)
    app.query("DELETE FROM draft WHERE study_id = "
              "(SELECT id FROM study WHERE study_key = 'DEMO-0004')")
    asks = page.evaluate("async () => (await (await fetch('config')).json()).dependencies"
                         ".filter((d) => (d.js || '').includes('rrgDraftAsked')).map((d) => d.id)")
    assert len(asks) == 2, asks  # the draft on request, and the draft arriving after opening
    # the autosave ticks wait too, until the draft has landed: a tick saving the typing
    # first is the other order, where the server leaves the typed box alone (tests/test_desk)
    ticks = page.evaluate("async () => (await (await fetch('config')).json()).dependencies"
                          ".filter((d) => (d.targets || []).some((t) => t[1] === 'tick'))"
                          ".map((d) => d.id)")
    assert ticks, "no autosave tick in the page's config"
    gate, held, held_ticks = ApiGate(page), [], []

    def hold(route) -> bool:
        body = route.request.post_data_json if route.request.method == "POST" else None
        if isinstance(body, dict) and body.get("fn_index") in asks:
            held.append(route)
            return True
        if isinstance(body, dict) and body.get("fn_index") in ticks:
            held_ticks.append(route)
            return True
        return False

    gate.rule = hold
    click_row(page, "DEMO-0004")
    pump_until(page, lambda: held, "the request of the draft that follows the open")
    typed = "Typed while the draft was on its way"
    type_into(page, "impression", typed)
    for route in held:
        route.continue_()
    page.wait_for_function("() => Object.keys(JSON.parse(document.querySelector"
                           "('#sync textarea').value).drafts || {}).length > 0")
    page.keyboard.type(", and after it landed.")
    full = typed + ", and after it landed."
    wait_value(page, "impression", f"v === {json.dumps(full)}")
    wait_value(page, "findings", "v.length > 20")  # the box not typed in shows the draft
    assert "your text is kept" in page.locator("#restore-note").inner_text()
    gate.rule = None
    for route in held_ticks:
        route.continue_()
    page.keyboard.press("Control+s")
    # (the gate's route is still on: the save's request goes out only while the test is in a
    # Playwright call, so the wait is the page's own; `wait_until` sleeping in Python held it
    # back for all its 60 s once, a loaded run where the request left after the key press)
    pump_until(page, lambda: latest_text(app, "DEMO-0004", "impression") == full,
               "the typed text")
    assert latest_text(app, "DEMO-0004", "findings") is None  # nothing of the draft stored
    draft = app.query("SELECT d.text FROM draft d JOIN study s ON s.id = d.study_id "
                      "WHERE s.study_key = 'DEMO-0004' AND d.section = 'impression'")
    assert draft and draft[0][0]
    page.locator("#model-draft").get_by_text("Model draft").click()
    assert page.locator("#new-impression textarea").input_value() == draft[0][0]
    gate.remove()


def test_quick_steps_all_land_and_a_film_clicked_on_the_way_opens_the_next_study(browser, app):
    """Found in a new-user trial: three Alt+N 80 ms apart went two studies on (Gradio drops a
    click of a button whose last click has no answer yet), and a film clicked just after a
    step opened the study being left, which closed by itself as the next one landed. Steps
    pressed meanwhile now go out one after another; the click opens the study that comes."""
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0001")
    page.locator("#film-head").click()  # (out of the boxes: Alt+N from the page)
    # Next goes to the next unfinished study (round the end): where three steps end
    keys = [k for (k,) in app.query(
        "SELECT s.study_key FROM worklist_item w JOIN study s ON s.id = w.study_id "
        "WHERE w.status != 'done' ORDER BY s.study_key")]
    start = key_on_screen(page)
    after = [k for k in keys if k > start] + [k for k in keys if k <= start]
    for _ in range(3):
        page.keyboard.press("Alt+n")
        page.wait_for_timeout(80)
    wait_on_study(page, after[2 % len(after)], f"three steps on from {start} through {after}")
    # and back, quicker (a second trial lost presses 40 ms apart: one landed while Gradio
    # was closing the last step)
    for _ in range(3):
        page.keyboard.press("Alt+p")
        page.wait_for_timeout(30)
    wait_on_study(page, start, f"three steps back to {start}")
    page.wait_for_timeout(500)  # (no step left over)
    assert key_on_screen(page) == start
    before = open_key(page)
    page.keyboard.press("Alt+n")
    page.locator("#film .current [data-index]").first.click()
    page.wait_for_function(f"() => document.querySelector('#film .current').dataset.study "
                           f"!== '{before}'")
    page.wait_for_function("() => !!document.querySelector('[data-open]') && window.rrgViewer"
                           ".meta && String(window.rrgViewer.meta.study) === document"
                           ".querySelector('#film .current').dataset.study")


class StepsAndRow(NamedTuple):
    """A fresh page, the study it opened, the unfinished studies Next goes through from it
    (round the end), and the Gradio event ids of a worklist row's select and of Next; the
    page records each navigation answer's kind in `window.arrivals` (page.js `rrgArrived`)."""

    page: Any
    start: str
    after: list[str]
    select: int
    step: int


def steps_and_row(browser, app: App) -> StepsAndRow:
    page = new_page(browser, app.url)
    start = key_on_screen(page)
    keys = [k for (k,) in app.query(
        "SELECT s.study_key FROM worklist_item w JOIN study s ON s.id = w.study_id "
        "WHERE w.status != 'done' ORDER BY s.study_key")]
    config = page.evaluate("async () => (await (await fetch('config')).json())")
    table = next(c["id"] for c in config["components"]
                 if c.get("props", {}).get("elem_id") == "worklist")
    page.evaluate("() => { const a = window.rrgArrived; window.arrivals = [];"
                  " window.rrgArrived = (k) => { window.arrivals.push(k); a(k); }; }")
    return StepsAndRow(
        page, start, [k for k in keys if k > start] + [k for k in keys if k <= start],
        next(d["id"] for d in config["dependencies"] if [table, "select"] in d["targets"]),
        next(d["id"] for d in config["dependencies"] if d.get("api_name") == "next_study"))


def test_a_step_click_gradio_drops_goes_out_again(browser, app):
    """A CI run beside a busy machine: three quick Alt+P went one study and stopped (the page
    held the reader's keys and the queued steps for 30 s, then dropped them). Gradio drops a
    click while it still counts the button's last one as running; made certain here: the
    button's own handlers miss the second step's click, once. The step goes out again (its
    request was not posted), and all three land, one study each."""
    page, start, after, _, _ = steps_and_row(browser, app)
    page.evaluate("""() => {
        const button = document.getElementById('next-study');
        window.dropped = 0; let seen = 0;
        button.parentElement.addEventListener('click', (e) => {
            if (e.target.closest('#next-study') && ++seen === 2) {
                window.dropped += 1; e.stopPropagation();
            }
        }, true);
    }""")
    page.locator("#film-head").click()
    for _ in range(3):
        page.keyboard.press("Alt+n")
        page.wait_for_timeout(80)
    wait_on_study(page, after[2 % len(after)], f"three steps on from {start} through {after}")
    assert page.evaluate("window.dropped") == 1  # (the drop happened: the test tests it)
    page.wait_for_timeout(2000)  # (longer than a resend's wait: no step left over)
    assert key_on_screen(page) == after[2 % len(after)]
    assert page.evaluate("window.arrivals").count("step") == 3


def test_keys_typed_while_a_second_row_is_on_its_way_reach_neither_patient(browser, app):
    """A new-user trial, 7 of 7: a click on one row, another row 150 ms later, then a click in
    the findings and typing: the words were saved into the first row's study, only passed
    through (rated and done already), and the note quoted one letter. The page held the keys
    until the first row's answer landed, not until the row chosen last was open. Made certain
    here: the second row's request is held while the reader types on the first row's study.
    The keys go into neither study and the note on the second quotes them."""
    page, start, _, select, _ = steps_and_row(browser, app)
    passed, wanted = [k for k in ("DEMO-0003", "DEMO-0004", "DEMO-0002") if k != start][:2]
    before = latest_text(app, passed, "findings")
    gate, held, selects = ApiGate(page), [], []

    def hold(route) -> bool:  # every select after the first (the chase sends it again)
        body = route.request.post_data_json if route.request.method == "POST" else None
        if isinstance(body, dict) and body.get("fn_index") == select:
            selects.append(body)
            if len(selects) > 1:
                held.append(route)
                return True
        return False

    gate.rule = hold
    page.get_by_text(passed, exact=True).filter(visible=True).first.click()
    page.get_by_text(wanted, exact=True).filter(visible=True).first.click()
    pump_until(page, lambda: key_on_screen(page) == passed and held
               and "row" in page.evaluate("window.arrivals"),
               f"{passed} on screen and answered while {wanted}'s row is held")
    box(page, "findings").click()
    page.keyboard.type("ZEBRA")
    page.wait_for_timeout(300)
    assert "ZEBRA" not in box(page, "findings").input_value()  # not in the passing study
    gate.rule = None
    for route in held:
        route.continue_()
    pump_until(page, lambda: key_on_screen(page) == wanted, f"{wanted} on screen")
    gate.remove()
    page.wait_for_function("() => !document.body.classList.contains('rrg-leaving')")
    assert "ZEBRA" not in box(page, "findings").input_value()
    assert "“ZEBRA”" in page.locator("#restore-note").inner_text()
    page.wait_for_timeout(1500)  # (an autosave tick would have stored it by now)
    assert latest_text(app, passed, "findings") == before
    assert not app.query("SELECT 1 FROM revision WHERE text LIKE '%ZEBRA%'")


def test_a_rows_late_answer_ends_no_step_on_its_way(browser, app):
    """Beside two busy processes three quick Alt+N went two studies on (2 of 12 tries): the
    select of the open study's row (clicked just before: it only saves) was answered after
    the first Alt+N had gone out, and that answer ended the step's hold, so the second Alt+N
    went out at once and Gradio dropped it (a button's click is dropped while its last one
    has no answer). Made certain here: the row's request and the first step's are held, the
    row's answer lands while the step is on its way, then two more Alt+N."""
    page, start, after, select, step = steps_and_row(browser, app)
    gate, held = ApiGate(page), {}

    def hold(route) -> bool:
        body = route.request.post_data_json if route.request.method == "POST" else None
        if isinstance(body, dict) and body.get("fn_index") in (select, step) \
                and body["fn_index"] not in held:
            held[body["fn_index"]] = route
            return True
        return False

    gate.rule = hold
    page.get_by_text(start, exact=True).filter(visible=True).first.click()  # its own row
    pump_until(page, lambda: select in held, "the row's request")
    page.locator("#film-head").click()  # (out of the boxes: Alt+N from the page)
    page.keyboard.press("Alt+n")
    pump_until(page, lambda: step in held, "the first step's request")
    held[select].continue_()
    pump_until(page, lambda: page.evaluate("window.arrivals").count("row") == 1,
               "the row's answer")
    for _ in range(2):
        page.keyboard.press("Alt+n")
        page.wait_for_timeout(80)
    gate.rule = None
    held[step].continue_()
    pump_until(page, lambda: key_on_screen(page) == after[2 % len(after)],
               f"three steps on from {start} through {after}",
               detail=lambda: (key_on_screen(page), page.evaluate("window.arrivals")))
    page.wait_for_timeout(500)  # (no step left over)
    assert key_on_screen(page) == after[2 % len(after)]
    gate.remove()


def test_a_click_on_the_open_row_handled_after_a_step_never_takes_the_reader_back(browser,
                                                                                  app):
    """Beside two busy processes three quick Alt+N left the page on the first study for 60 s
    (run A of session 25: its app counted active seconds for that study only). The click on
    the open study's own row (it only saves) and the step are two events whose handlers run
    on threads of their own: under load the step took the tab's lock first and opened the
    next study, then the row's select, carrying the row it was sent with, opened the first
    study again. Made certain here: the row's request is held until the step has landed."""
    page, start, after, select, _ = steps_and_row(browser, app)
    gate, held = ApiGate(page), {}

    def hold(route) -> bool:
        body = route.request.post_data_json if route.request.method == "POST" else None
        if isinstance(body, dict) and body.get("fn_index") == select and not held:
            held["row"] = route
            return True
        return False

    gate.rule = hold
    page.get_by_text(start, exact=True).filter(visible=True).first.click()  # its own row
    pump_until(page, lambda: "row" in held, "the row's request")
    page.locator("#film-head").click()  # (out of the boxes: Alt+N from the page)
    page.keyboard.press("Alt+n")
    pump_until(page, lambda: key_on_screen(page) == after[0]
               and "step" in page.evaluate("window.arrivals"), f"the step to {after[0]}")
    gate.rule = None
    held["row"].continue_()
    pump_until(page, lambda: "row" in page.evaluate("window.arrivals"), "the row's answer")
    page.wait_for_timeout(1000)
    assert key_on_screen(page) == after[0], page.evaluate("window.arrivals")
    assert app.query("SELECT count(*) FROM audit_event WHERE action = 'save'") == [(0,)]
    gate.remove()


def test_a_late_answer_never_leaves_one_patients_text_beside_anothers_film(browser, app):
    """A loaded run: a Revert's answer, handled on DEMO-0004 before a row click opened
    DEMO-0001, landed after the row's answer; the page showed DEMO-0001's film beside
    DEMO-0004's draft text and status, and took DEMO-0004 for the open study. Made certain
    here with a Save (a request of its own, not the queue's): the server stores it, its answer
    is held until the next study is open and the reader has typed in it, then delivered. The
    page takes none of it, draws the open study again and puts the reader's typing back; the
    typing is stored with that study only."""
    page = new_page(browser, app.url)
    start = key_on_screen(page)
    other = next(k for (k,) in app.query("SELECT study_key FROM study ORDER BY study_key")
                 if k != start)
    (other_id,) = app.query("SELECT id FROM study WHERE study_key = ?", other)[0]
    config = page.evaluate("async () => (await (await fetch('config')).json())")
    save = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "save")
    gate, late = ApiGate(page), []

    def hold_answer(route) -> bool:
        body = route.request.post_data_json if route.request.method == "POST" else None
        if late or not isinstance(body, dict) or body.get("fn_index") != save:
            return False
        late.append((route, route.fetch()))  # handled by the server, its answer kept here
        return True

    gate.rule = hold_answer
    type_into(page, "findings", "Typed for the first patient.")
    page.locator("#save").click()
    pump_until(page, lambda: late, "the Save's request")
    assert latest_text(app, start, "findings") == "Typed for the first patient."
    click_row(page, other)
    type_into(page, "impression", "Typed for the second patient.")
    gate.rule = None
    route, response = late[0]
    answered = page.evaluate("window.rrg.answered")
    route.fulfill(response=response)

    def sync() -> dict[str, Any]:
        return json.loads(page.locator("#sync textarea").input_value() or "{}")

    # The open study drawn again, the reader's typing put back ("drawn again"); or, where an
    # autosave tick stored that typing and answered after the late answer first (a CI run),
    # that newer answer taken, with nothing of the first patient's in the boxes (the
    # assertions below)
    pump_until(page, lambda: "drawn again" in page.locator("#restore-note").inner_text()
               or page.evaluate("(was) => window.rrg.answered > was && !document.body"
                                ".classList.contains('rrg-stale')", answered),
               "the open study drawn again",
               detail=lambda: (sync(), page.locator("#save-status").inner_text()))
    assert "Typed for the first patient." not in box(page, "findings").input_value()
    assert key_on_screen(page) == other
    assert sync()["study"] == other_id
    assert page.evaluate("window.rrg.study") == other_id
    assert box(page, "impression").input_value() == "Typed for the second patient."
    gate.remove()
    wait_until(lambda: latest_text(app, other, "impression") == "Typed for the second patient.",
               "the second patient's typing stored")
    assert latest_text(app, start, "impression") != "Typed for the second patient."
    # (and still so once the late answer has surely landed)
    assert key_on_screen(page) == other and sync()["study"] == other_id
    assert "Typed for the first patient." not in box(page, "findings").input_value()
    # An answer about another study whose sync was overwritten by an older one's before the
    # page read it (a loaded run: the page took the older study for the open one, beside the
    # newer one's film). The page sees every value set (#sync's change event) ...
    wait_until(lambda: page.evaluate("window.rrg.newest && window.rrg.newest.n") == sync()["n"],
               "the page to have seen the last answer's sync as it was set")
    # ... and, an answer about another study newer than the one it read still unread a second
    # later, draws the open study again
    (start_id,) = app.query("SELECT id FROM study WHERE study_key = ?", start)[0]
    lost = {**sync(), "study": start_id, "n": sync()["n"] + 1}
    page.evaluate("(v) => window.rrgSyncSet(v)", json.dumps(lost))
    pump_until(page, lambda: sync()["n"] >= lost["n"] and page.evaluate(
        "(n) => window.rrg.answered >= n && !document.body.classList.contains('rrg-stale')",
        lost["n"]), "the open study drawn again after an answer never read",
        detail=lambda: (sync(), page.evaluate("window.rrg.newest")))
    assert key_on_screen(page) == other and page.evaluate("window.rrg.study") == other_id
    assert box(page, "impression").input_value() == "Typed for the second patient."


def test_a_refused_step_or_row_holds_nothing_after_its_notice(browser, app):
    """A Next or a worklist row whose request the server refuses ("Slow down": too many of
    the reader's requests waiting) gets no answer, and the page held the reader's keys and
    steps for 30 s after the notice that says to try again: words typed into the findings
    were swallowed and the next Alt+N went nowhere (found reading the flood test's record).
    Made certain here: the server's refusal (fair.py's sentence, server.py's 429) answers the
    first step's request, then the first row's."""
    page, start, after, select, step = steps_and_row(browser, app)
    gate, refused = ApiGate(page), []
    message = SLOW_DOWN.format(what="reader", n=24)

    def refuse(route) -> bool:
        body = route.request.post_data_json if route.request.method == "POST" else None
        if isinstance(body, dict) and body.get("fn_index") in (select, step) \
                and body["fn_index"] not in refused:
            refused.append(body["fn_index"])
            route.fulfill(status=429, content_type="application/json",
                          headers={"Retry-After": "2"},
                          body=json.dumps({"detail": message, "error": message}))
            return True
        return False

    def held() -> bool:
        return page.evaluate("() => document.body.classList.contains('rrg-leaving')")

    gate.rule = refuse
    page.locator("#film-head").click()  # (out of the boxes: Alt+N from the page)
    page.keyboard.press("Alt+n")
    page.get_by_text("Slow down").first.wait_for()
    pump_until(page, lambda: not held(), "the page to take keys again", timeout=10)
    # and Gradio's "Error" is drawn over no output: it hid the worklist and sat on the middle
    # of the film (a screenshot); a refused event's status is kept on the hidden #sync alone
    # (`track_quiet_progress_on`)
    assert not page.locator(".wrap .error").filter(visible=True).count()
    type_into(page, "findings", "Typed after the notice.")
    assert box(page, "findings").input_value() == "Typed after the notice."
    page.keyboard.press("Alt+n")  # tried again, as the notice says: it goes, with the words
    pump_until(page, lambda: key_on_screen(page) == after[0], f"the step to {after[0]}",
               timeout=10)
    assert latest_text(app, start, "findings") == "Typed after the notice."
    page.get_by_text(after[1], exact=True).filter(visible=True).first.click()
    pump_until(page, lambda: select in refused, "the row's request")
    pump_until(page, lambda: not held(), "the page to take keys after the row", timeout=10)
    page.wait_for_timeout(3000)  # (a refused row is not chased: the reader was told to wait)
    assert key_on_screen(page) == after[0] and refused == [step, select]
    # a refused Save says so too (with Gradio's "Error" boxes hidden, nothing else did)
    save = page.evaluate("gradio_config.dependencies.find((d) => d.api_name === 'save').id")
    refused.clear()
    select, step = save, None  # (the rule refuses the Save's join once, with this sentence)
    message = SLOW_DOWN.format(what="tab", n=12)
    type_into(page, "findings", "Typed, then Save refused.")
    page.keyboard.press("Control+s")
    pump_until(page, lambda: save in refused, "the Save's request")
    wait_text(page, "restore-note", "this tab has 12 requests waiting")
    gate.remove()


def test_typed_text_survives_a_reload_with_no_wait(browser, app):
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0003")
    # a reload right after typing: the browser's leave-page guard fires, and the text is
    # there afterwards (restored from this browser and saved)
    dialogs: list[str] = []

    def accept(dialog) -> None:
        dialogs.append(dialog.type)
        dialog.accept()

    page.on("dialog", accept)
    type_into(page, "impression", "Typed then reloaded at once.")
    page.reload()
    page.locator("#film .current").wait_for()
    assert dialogs == ["beforeunload"]
    wait_value(page, "impression", "v === 'Typed then reloaded at once.'")
    wait_until(lambda: latest_text(app, "DEMO-0003", "impression")
               == "Typed then reloaded at once.", "the restored text to be saved")
    # nothing else was written: no empty revision from a page still loading
    assert app.query("SELECT COUNT(*) FROM revision WHERE text = ''") == [(0,)]


def _answers_lost(gate: ApiGate, text: str, forward: bool, typed: bool = False) -> list[str]:
    """Until `gate.rule` changes, a request of the page that carries `text` gets no answer:
    with `forward` the server still receives and stores it (a reload that cut the answer
    off), without it the request never leaves the page (a save that did not happen; held
    until `gate.reload()`, which drops it). Returns the URLs of the requests taken.
    `typed`: a box holding only the start of `text` is held back too (an autosave tick that
    came while the text was typed into an empty box: a full run stored "Mi" of "Mine")."""
    cut: list[str] = []
    starts = [json.dumps(text[:n]) for n in range(1, len(text))] if typed else []

    def carries(body: str) -> bool:
        # forwarded: that exact text; held back: any text containing it (a partial autosave
        # while typing included)
        if forward:
            return json.dumps(text) in body
        return text in body or any(start in body for start in starts)

    def rule(route) -> bool:
        body = route.request.post_data or ""
        if route.request.method != "POST" or not carries(body):
            return False
        cut.append(route.request.url)
        if forward:
            route.fetch()
        answer_never_comes(route)
        return True

    gate.rule = rule
    return cut


def test_a_reload_right_after_an_autosave_whose_answer_was_lost_keeps_the_tail(browser, app):
    """The race of the documented bug, made certain: this tab's save reaches the server (a new
    revision) but its answer never reaches the page, the reader types on and reloads at once.
    The page's stored text was edited from the older revision; it is still restored, because
    the newer revision holds text this tab sent itself."""
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0003")
    page.on("dialog", lambda dialog: dialog.accept())
    gate = ApiGate(page)
    cut = _answers_lost(gate, "First part.", forward=True)
    type_into(page, "impression", "First part.")
    page.keyboard.press("Control+s")
    pump_until(page, lambda: latest_text(app, "DEMO-0003", "impression") == "First part.",
               "the save to reach the server")
    assert cut
    _answers_lost(gate, "First part. And the tail typed after it.", forward=False)
    page.keyboard.press("End")
    page.keyboard.type(" And the tail typed after it.")
    gate.reload()
    page.locator("#film .current").wait_for()
    full = "First part. And the tail typed after it."
    wait_value(page, "impression", f"v === {json.dumps(full)}")
    wait_until(lambda: latest_text(app, "DEMO-0003", "impression") == full,
               "the restored text to be saved on top of the tab's own revision")
    # "it is being saved" clears once it is saved (it stayed on screen: a new-user trial)
    page.wait_for_function("() => !document.querySelector('#restore-note').innerText"
                           ".includes('Restored')", timeout=15_000)


def test_unsaved_text_never_silently_overwrites_another_save(browser, app):
    """The page was left with unsaved text, and meanwhile another browser saved the study: on
    the next load the newer revision stays in the boxes and the reader is asked."""
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0003")
    page.on("dialog", lambda dialog: dialog.accept())
    gate = ApiGate(page)
    _answers_lost(gate, "Mine, never sent.", forward=False, typed=True)
    type_into(page, "impression", "Mine, never sent.")
    other = browser.new_context(viewport={"width": 1500, "height": 1000})  # its own storage
    try:
        theirs = other.new_page()
        theirs.goto(app.url)
        click_row(theirs, "DEMO-0003")
        type_into(theirs, "impression", "Theirs, saved elsewhere.")
        theirs.keyboard.press("Control+s")
        wait_until(lambda: latest_text(app, "DEMO-0003", "impression")
                   == "Theirs, saved elsewhere.", "the other browser's save")
    finally:
        other.close()
    gate.reload()
    page.locator("#restore-mine").wait_for()
    assert "saved elsewhere" in page.locator("#restore-note").inner_text()
    wait_value(page, "impression", "v === 'Theirs, saved elsewhere.'")
    assert latest_text(app, "DEMO-0003", "impression") == "Theirs, saved elsewhere."
    page.locator("#restore-mine").click()
    wait_value(page, "impression", "v === 'Mine, never sent.'")
    wait_until(lambda: latest_text(app, "DEMO-0003", "impression") == "Mine, never sent.",
               "the reader's choice to be saved on top")
    history = [t for (t,) in app.query(
        "SELECT text FROM revision WHERE section = 'impression' ORDER BY number")]
    # the other browser's autosave may have stored part of its typing before its Ctrl+S
    assert history[-2:] == ["Theirs, saved elsewhere.", "Mine, never sent."]
    assert all("Theirs, saved elsewhere.".startswith(t) for t in history[:-2])


def test_two_tabs_of_one_browser_never_drop_each_others_unsaved_text(browser, app):
    """Found in a new-user trial (3 of 3): tabs A and B of one browser on one study; B saves,
    A types and reloads. A's unsaved text was gone (B, with nothing unsaved, removed the
    study's one stored entry every 200 ms); now A is asked, and its words come back."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    try:
        a, b = context.new_page(), context.new_page()
        for page in (a, b):
            page.goto(app.url)
            page.locator("#film [data-study]").first.wait_for(timeout=60_000)
            click_row(page, "DEMO-0002")
        a.on("dialog", lambda dialog: dialog.accept())  # the leave-page guard
        type_into(b, "impression", "B saved this.")
        b.keyboard.press("Control+s")
        wait_until(lambda: latest_text(app, "DEMO-0002", "impression") == "B saved this.",
                   "tab B's save")
        type_into(a, "impression", "A typed, never saved.")
        a.reload()
        a.locator("#restore-mine").wait_for()
        assert "saved elsewhere" in a.locator("#restore-note").inner_text()
        wait_value(a, "impression", "v === 'B saved this.'")
        a.locator("#restore-mine").click()
        wait_value(a, "impression", "v === 'A typed, never saved.'")
        wait_until(lambda: latest_text(app, "DEMO-0002", "impression")
                   == "A typed, never saved.", "A's text to be saved on top")
        # B still shows what it saved, and was never asked about A's text
        assert box(b, "impression").input_value() == "B saved this."
        assert b.locator("#restore-mine").count() == 0
    finally:
        context.close()


def _click_row_of(page, key: str) -> str:
    """Click a worklist row; return what the page says once the study opened or was held."""
    page.get_by_text(key, exact=True).filter(visible=True).first.click()
    page.wait_for_function(
        "(key) => document.querySelector('#film-head').innerText.includes('Study ' + key)"
        " || document.querySelector('#save-status').innerText.includes('Still on this study')",
        arg=key)
    return page.locator("#save-status").inner_text()


# whether the page took the answer of a save of `text` in `section` (its #sync)
SHOWS_SAVED = """([section, text]) => {
  try { return JSON.parse(document.querySelector('#sync textarea').value).shown[section] === text;
  } catch (e) { return false; }
}"""


def test_after_a_restoring_reload_another_tabs_save_of_an_untouched_section_holds_nothing(
        browser, app):
    """Found in a new-user trial: tab one typed findings and reloaded at once (restored and
    autosaved); tab two saved the impression; tab one, which never touched the impression,
    was held on the study by a conflict over it when it clicked another row, and its Keep mine
    saved the stale draft impression over tab two's save. A newer save of a section the reader
    left as it was is told, holds nothing, and nothing of the tab is saved over it; a section
    the reader did change still conflicts."""
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    try:
        one, two = context.new_page(), context.new_page()
        for page in (one, two):
            page.goto(app.url)
            page.locator("#film [data-study]").first.wait_for(timeout=60_000)
        click_row(one, "DEMO-0004")
        one.on("dialog", lambda dialog: dialog.accept())  # the leave-page guard
        mine = "Tab one's findings, typed then reloaded at once."
        type_into(one, "findings", mine)
        one.reload()
        one.locator("#film .current").wait_for()
        wait_value(one, "findings", f"v === {json.dumps(mine)}")
        wait_until(lambda: latest_text(app, "DEMO-0004", "findings") == mine,
                   "the restored findings to be autosaved")
        draft = box(one, "impression").input_value()
        assert draft and latest_text(app, "DEMO-0004", "impression") is None

        def saved_with(page, section: str, words: str) -> str:
            """`words` added to the page's section, then Ctrl+S; the text saved."""
            box(page, section).click()
            page.keyboard.press("Control+End")
            page.keyboard.type(words)
            page.keyboard.press("Control+s")
            saved = box(page, section).input_value()
            wait_until(lambda: latest_text(app, "DEMO-0004", section) == saved,
                       f"the {section} saved with {words!r}")
            # ...and the page told so: what follows is about a section the tab knows it
            # saved (in a CI run under heavy load, tab one reloaded before it had taken its
            # Save's answer: its stored copy was edited from the revision before, and the
            # page, not knowing the text was stored, rightly asked whether to restore it)
            page.wait_for_function(SHOWS_SAVED, arg=[section, saved])
            return saved

        def tab_two_adds(words: str) -> str:
            return saved_with(two, "impression", words)

        click_row(two, "DEMO-0004")
        theirs = tab_two_adds(" T2IMPR")
        wait_text(one, "save-status", "A newer version of the impression was saved elsewhere")
        status = _click_row_of(one, "DEMO-0002")
        assert "Still on this study" not in status, status
        assert "DEMO-0002" in one.locator("#film-head").inner_text()
        # (tab two's autosave may have stored part of " T2IMPR" while it was typed: a run
        # beside other work did; nothing of tab one's came after it)
        impressions = revisions(app, "DEMO-0004", "impression")
        assert impressions[-1] == theirs and all(theirs.startswith(t) for t in impressions)
        # (an autosave tick may have stored part of the findings while they were typed: a
        # run beside two busy processes did; nothing of tab one's came after them)
        kept = revisions(app, "DEMO-0004", "findings")
        assert kept[-1] == mine and all(mine.startswith(k) for k in kept), kept

        # back on the study, told of another save of the impression: Keep mine keeps only
        # what tab one changed (its findings); its box shows tab two's impression
        click_row(one, "DEMO-0004")
        wait_value(one, "impression", f"v === {json.dumps(theirs)}")
        theirs = tab_two_adds(" T2B")
        wait_text(one, "save-status", "A newer version of the impression was saved elsewhere")
        box(one, "findings").click()
        one.keyboard.press("Control+End")
        one.keyboard.type(" More.")
        one.locator("#keep-mine").click()
        wait_value(one, "impression", f"v === {json.dumps(theirs)}")
        wait_until(lambda: latest_text(app, "DEMO-0004", "findings") == mine + " More.",
                   "tab one's findings to be saved")
        assert latest_text(app, "DEMO-0004", "impression") == theirs
        assert draft not in revisions(app, "DEMO-0004", "impression")

        # a section tab one did change still conflicts: leaving is held until it chooses
        theirs = tab_two_adds(" T2C")
        box(one, "impression").click()
        one.keyboard.press("Control+End")
        one.keyboard.type(" T1")
        status = _click_row_of(one, "DEMO-0002")
        assert "Still on this study" in status and "impression not saved" in status, status
        assert latest_text(app, "DEMO-0004", "impression") == theirs
        one.locator("#keep-mine").click()
        wait_until(lambda: latest_text(app, "DEMO-0004", "impression")
                   == theirs.removesuffix(" T2C") + " T1", "tab one's impression on top")

        # new-user trial 18 (high): a section tab one saved and then left alone is not unsaved
        # text on its reload. Tab one saves its findings; tab two saves newer findings; tab
        # one types only in the impression and reloads at once: its impression comes back and
        # is saved, tab two's findings stay, and nothing asks to "restore" tab one's older
        # findings over them (Restore saved them over tab two's)
        # the click held by the conflict was answered: Keep mine stays on the study (the page
        # sent that click again once the conflict had gone, as it does a lost one, and opened
        # DEMO-0002 a moment after Keep mine: beside two busy processes, as the test typed)
        one.wait_for_timeout(3000)  # (the page's re-sending waits 1.5-2.5 s)
        assert "DEMO-0004" in one.locator("#film-head").inner_text()
        wait_value(one, "findings", f"v === {json.dumps(mine + ' More.')}")
        ours = saved_with(one, "findings", " A.")
        two.reload()
        two.locator("#film .current").wait_for()
        if "DEMO-0004" not in two.locator("#film-head").inner_text():
            click_row(two, "DEMO-0004")
        wait_value(two, "findings", f"v === {json.dumps(ours)}")
        newest = saved_with(two, "findings", " T2F")
        box(one, "impression").click()
        one.keyboard.press("Control+End")
        one.keyboard.type(" Unsaved.")
        one.reload()
        one.locator("#film .current").wait_for()
        wait_value(one, "impression", "v.endsWith(' T1 Unsaved.')")
        wait_value(one, "findings", f"v === {json.dumps(newest)}")
        wait_until(lambda: (latest_text(app, "DEMO-0004", "impression") or "").endswith(
            " T1 Unsaved."), "tab one's restored impression to be saved")
        assert one.locator("#restore-mine").count() == 0
        assert latest_text(app, "DEMO-0004", "findings") == newest
    finally:
        context.close()


def test_a_closed_tabs_unsaved_text_comes_back_in_the_next_tab(browser, app):
    """Per-tab entries: the text of a tab that is gone (closed with its requests cut off) is
    adopted by the next page of that browser opening the study, while a live tab keeps its own."""
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    try:
        a = context.new_page()
        a.goto(app.url)
        a.locator("#film [data-study]").first.wait_for(timeout=60_000)
        click_row(a, "DEMO-0003")
        a.route("**/gradio_api/**", lambda route: route.abort())  # nothing reaches the server
        type_into(a, "findings", "Typed in a tab that was then closed.")
        a.close()
        assert latest_text(app, "DEMO-0003", "findings") is None
        time.sleep(3.5)  # the closed page's last "alive" mark goes stale (pagehide may not run)
        c = context.new_page()
        c.goto(app.url)
        wait_value(c, "findings", "v === 'Typed in a tab that was then closed.'")
        assert "Restored" in c.locator("#restore-note").inner_text()
        wait_until(lambda: latest_text(app, "DEMO-0003", "findings")
                   == "Typed in a tab that was then closed.", "the restored text to be saved")
    finally:
        context.close()


def test_offline_the_page_says_nothing_is_saved_and_saves_once_back(browser, app):
    """A new-user trial pulled the network: the status kept saying the text was saved while
    the reader typed on. Offline, the page says nothing is saved now (the text kept in this
    browser); once back, the text is saved and the note goes."""
    page = new_page(browser, app.url)
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.type), dialog.dismiss()))
    click_row(page, "DEMO-0002")
    page.context.set_offline(True)
    try:
        type_into(page, "findings", "Typed while the server could not be reached.")
        wait_text(page, "restore-note", "Offline: the server cannot be reached", timeout=15_000)
        page.wait_for_timeout(6000)  # offline a while, as new-user trial 20 was
        assert latest_text(app, "DEMO-0002", "findings") != \
            "Typed while the server could not be reached."
    finally:
        page.context.set_offline(False)
    wait_until(lambda: latest_text(app, "DEMO-0002", "findings")
               == "Typed while the server could not be reached.", "the text saved once back")
    page.wait_for_function("() => !document.getElementById('restore-note').innerText"
                           ".includes('Offline')")
    # the page's own reconnection raised no "Leave site?" question the reader did not cause
    # (trial 20: Gradio reloaded the page once back, the guard asked, and Stay left a page
    # that saved nothing)
    assert dialogs == [], dialogs
    page.close()


def test_switching_patients_leaves_nothing_of_the_first_on_screen(browser, app):
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0003")  # patient DEMO-P2, shown by its pseudonym
    first_ref = page.locator("#ref-findings textarea").input_value()
    first_patient = patient_on_screen(page)
    assert first_ref and first_patient.startswith("anon-")
    first_src = page.locator("#film .current img").first.get_attribute("src")
    # the enlarged view of this patient's image is open when the reader moves on
    page.locator("#film .current img").first.click()
    page.wait_for_function("() => window.rrgViewer.full")
    page.keyboard.press("Alt+n")  # next unfinished: DEMO-0004, patient DEMO-P3
    page.locator("#film-head").get_by_text("DEMO-0004").wait_for()
    page.locator("#enlarged").wait_for(state="hidden")
    page.wait_for_function(
        "() => !document.querySelector('#metrics-notes').innerText.includes('Computing')")
    panels = ["#film", "#study-header", "#edit-findings", "#edit-impression", "#ref-findings",
              "#ref-impression", "#new-findings", "#new-impression", "#diff", "#save-status",
              "#draft-model", "#enlarged", "#metrics-notes"]
    for sel in panels:
        if page.locator(sel).count() == 0:
            continue  # not rendered (a closed accordion): shows nothing
        text = page.locator(sel).evaluate(
            "el => el.innerText + ' ' + [...el.querySelectorAll('textarea')]"
            ".map(t => t.value).join(' ')")
        assert first_patient not in text and "DEMO-0003" not in text, sel
        if sel not in ("#edit-findings", "#new-findings", "#diff"):
            # (a retrieval draft may legitimately quote another patient's reference report)
            assert first_ref[:40] not in text, sel
    # the window/level image is cleared
    assert page.evaluate("() => [window.rrgViewer.img, document.querySelector('#wl-canvas')"
                         ".width]") == [None, 1]
    srcs = page.locator("#film img").evaluate_all("els => els.map(e => e.getAttribute('src'))")
    assert first_src not in srcs
    second_patient = patient_on_screen(page)
    assert second_patient.startswith("anon-") and second_patient != first_patient


def patient_on_screen(page) -> str:
    """The patient key in the film heading (every patient key is a keyed pseudonym)."""
    import re

    found = re.search(r"Patient (\S+)", page.locator("#film-head").inner_text())
    assert found, page.locator("#film-head").inner_text()
    return found.group(1)


def test_a_status_line_answered_late_never_replaces_a_newer_one(browser, app):
    """An autosave tick handled before Accept whose answer lands after Accept's question (its
    answer is heavier, with the worklist's rows): the page shows the late note for a moment
    and puts the question back, the newest status line it was given. The question was lost
    under "findings saved as revision 1 (autosave)" in an official CI run, and a tick's note
    replaced Sign's refusal in a loaded run."""
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0004")
    wait_value(page, "findings", "v.length > 20")
    ticks = page.evaluate("async () => (await (await fetch('config')).json()).dependencies"
                          ".filter((d) => (d.targets || []).some((t) => t[1] === 'tick'))"
                          ".map((d) => d.id)")
    words = "My own words, typed over the draft."
    gate, held = ApiGate(page), []

    def hold(route) -> bool:
        body = route.request.post_data_json if route.request.method == "POST" else None
        if not (isinstance(body, dict) and body.get("fn_index") in ticks
                and words in (route.request.post_data or "")):
            return False
        held.append((route, route.fetch()))  # handled by the server now, answered later
        gate.rule = None
        return True

    # every status line the page is given (and every text it showed), in that order
    page.evaluate("() => { window.seen = []; const set = window.rrgStatusSet; "
                  "window.rrgStatusSet = (v) => { window.seen.push(v); if (set) set(v); }; "
                  "const line = document.querySelector('#save-status'); "
                  "new MutationObserver(() => window.seen.push(line.innerText))"
                  ".observe(line, {subtree: true, childList: true, characterData: true}); }")
    gate.rule = hold
    type_into(page, "findings", words)
    pump_until(page, lambda: held, "a tick carrying the typed words")
    assert latest_text(app, "DEMO-0004", "findings") == words  # the tick's autosave
    page.locator("#accept").click()
    page.wait_for_function("() => !document.querySelector('#accept-confirm').disabled")
    wait_text(page, "save-status", "over your own text?")
    route, response = held[0]
    route.fulfill(response=response)
    page.wait_for_function("() => window.seen.some((v) => v.includes('(autosave)'))")
    wait_text(page, "save-status", "over your own text?")
    page.wait_for_timeout(1000)  # (and it stays)
    status = page.locator("#save-status").inner_text()
    assert "over your own text?" in status and "(autosave)" not in status, status
    gate.remove()
    # a row click's line is numbered too (its handler is not wrapped by the guard): a late
    # answer after it puts back that line, not the one before it
    page.locator("#accept-cancel").click()
    wait_text(page, "save-status", "Not accepted.")
    before = page.evaluate("() => window.rrg.status.n")
    click_row(page, "DEMO-0003")
    page.wait_for_function("(n) => window.rrg.status.n > n && !window.rrg.status.value"
                           ".startsWith('Not accepted.')", arg=before)


def test_status_accept_and_rating_mean_what_they_say(browser, app):
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0004")
    press_draft(page)
    wait_value(page, "findings", "v.length > 20")
    draft = box(page, "findings").input_value()
    before = status_of(app, "DEMO-0004")[0]
    # open and active for a while, then passed with Alt+N: time counts, the status does not
    page.mouse.move(300, 300)
    wait_until(lambda: status_of(app, "DEMO-0004")[1] > 0, "active time to be counted")
    # the minutes column follows with no save (it stood still until the next save or study)
    wait_until(lambda: any(r[1] == "DEMO-0004" and float(r[3] or 0) > 0
                           for r in table_rows(page, "worklist")),
               "the row's minutes to show the time")
    page.locator("#film-head").click()
    page.keyboard.press("Alt+n")
    page.locator("#film-head").get_by_text("DEMO-0004").wait_for(state="detached")
    assert status_of(app, "DEMO-0004")[0] == before
    assert app.query("SELECT COUNT(*) FROM revision") == [(0,)]
    click_row(page, "DEMO-0004")
    # accept with the reader's own edit on screen: it asks first and stores nothing
    type_into(page, "findings", "My own findings, not the draft.")
    page.locator("#accept").click()
    # the question: its buttons say what they do (the status line that explains it may be
    # replaced by the typing's autosave note at once: two CI runs under load saw only that)
    offered = "() => !document.querySelector('#accept-confirm').disabled"
    page.wait_for_function(offered)
    assert page.locator("#accept-confirm").inner_text().startswith("Accept the draft, replacing")
    assert "stays in the history" in page.locator("#accept-confirm-row").inner_text()
    assert app.query("SELECT COUNT(*) FROM rating") == [(0,)]
    page.locator("#accept-cancel").click()
    page.wait_for_function(f"() => !({offered[6:]})")
    assert box(page, "findings").input_value() == "My own findings, not the draft."
    # Alt+A from the ReXVal comment at 1366x768: the question is put in view (the column
    # stayed scrolled down to the comment: issue #21, defect 8)
    page.set_viewport_size({"width": 1366, "height": 768})
    page.locator("#comment textarea").click()
    page.keyboard.type("Reviewed with the prior.")
    page.keyboard.press("Alt+a")
    page.wait_for_function(offered)
    cancel_at = top_in_column(page, "#accept-cancel")
    # the status line's question comes after the buttons and does not move them (it pushed
    # Cancel 15-24 px down ~2 s after it came, and a click meant for it hit Accept draft: a
    # new-user trial at 1366x768); an autosave's note may come above it, in the same place
    # (a tick's note answered late is replaced by the question again: the test before)
    wait_text(page, "save-status", "over your own text?")
    assert top_in_column(page, "#accept-cancel") == cancel_at
    box(page, "findings").click()  # typing on while asked: the autosave's note comes too
    page.keyboard.press("Control+End")
    page.keyboard.type(" Seen.")
    wait_text(page, "save-status", "(autosave)")
    assert top_in_column(page, "#accept-cancel") == cancel_at
    wait_in_view(page, "#accept-confirm")
    page.locator("#accept-confirm").click()
    wait_text(page, "save-status", "Draft accepted without changes")
    wait_value(page, "findings", f"v === {json.dumps(draft)}")
    ratings = app.query("SELECT likert, acceptable FROM rating")
    assert ratings == [(None, 1)]  # "accepted without changes", no invented Likert
    assert latest_text(app, "DEMO-0004", "findings") == draft
    history = [t for (t,) in app.query("SELECT text FROM revision WHERE section = 'findings' "
                                       "ORDER BY number")]
    assert history[-1] == draft and all(t for t in history)
    assert status_of(app, "DEMO-0004")[0] == "in_review"
    # an empty rating is refused and says why
    page.locator("#rate").click()
    wait_text(page, "rate-status", "choose an overall quality score")
    assert app.query("SELECT COUNT(*) FROM rating") == [(1,)]
    assert status_of(app, "DEMO-0004")[0] == "in_review"
    # the score by key (not typing in a box), then the study is done
    page.locator("#film-head").click()
    page.keyboard.press("Digit4")
    # Alt+R with the column scrolled to its end: the stored rating's line, under Submit, is
    # brought into view (out of view at 1366x768, it left a new-user trial unsure)
    page.evaluate("() => { document.querySelector('#editor-col').scrollTop = 1e6;"
                  " window.scrollTo(0, 1e6); }")
    page.keyboard.press("Alt+r")
    wait_text(page, "rate-status", "Rated 4/5 at")  # (its score, not "#2" after the Accept)
    wait_in_view(page, "#rate-status")
    # and the status line above no longer asks for the score (a new-user trial)
    wait_text(page, "save-status", "Rated 4/5 at")
    assert "Now give an overall score" not in page.locator("#save-status").inner_text()
    assert app.query("SELECT likert, acceptable FROM rating ORDER BY number DESC LIMIT 1"
                     ) == [(4, 1)]
    assert status_of(app, "DEMO-0004")[0] == "done"
    # an edit saved after that withdraws "acceptable without changes", and the box unticks
    # (new-user trial 17: the status line said so while the box stayed ticked)
    assert page.locator("#acceptable input").is_checked()
    box(page, "findings").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(" Edited after accepting.")
    page.keyboard.press("Control+s")
    # the save that withdrew it says so; an autosave tick that caught the typing half-way
    # withdrew it first, and the Save's line then says the score came before these edits
    page.wait_for_function("() => /withdrawn|before your later edits/.test("
                           "document.querySelector('#rate-status').innerText)")
    page.wait_for_function("() => !document.querySelector('#acceptable input').checked")
    assert app.query("SELECT likert, acceptable FROM rating ORDER BY number DESC LIMIT 1"
                     ) == [(4, 0)]
    # and when the typed text is saved by a Revert (new-user trial 18: Accept, a few keys, then
    # Revert left the box ticked while the stored rating had withdrawn it)
    page.locator("#accept").click()
    page.locator("#accept-confirm").click()
    page.wait_for_function("() => document.querySelector('#acceptable input').checked")
    box(page, "findings").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(" quick")
    page.locator("#revert").click()
    page.locator("#revert-confirm").click()
    # (the Revert's own answer: an autosave tick of " quick" withdraws the Accept as well, and
    # a CI run beside a busy machine moved on with the Revert still on its way)
    wait_text(page, "save-status", "Reverted to the draft")
    page.wait_for_function("() => !document.querySelector('#acceptable input').checked")
    # (withdrawn by the Revert's save, or by a tick's before it: the Revert's line then says
    # the score came before the edits, as above; a clean-clone run met the tick)
    page.wait_for_function("() => /withdrawn|before your later edits/.test("
                           "document.querySelector('#rate-status').innerText)")
    assert app.query("SELECT acceptable FROM rating ORDER BY number DESC LIMIT 1") == [(0,)]
    # coming back to the study, the line under the rating does not say "Accepted" (trial 18)
    click_row(page, "DEMO-0001")
    click_row(page, "DEMO-0004")
    wait_text(page, "rate-status", "withdrawn")
    assert "Accepted without changes" not in page.locator("#rate-status").inner_text()
    # a score, then an edit saved: the line says the score came before (a new-user trial saw
    # only "Rated 4/5 at 07:08" beside a report edited since), and says it again on return
    page.locator("#film-head").click()
    page.keyboard.press("Digit5")
    page.locator("#rate").click()
    wait_text(page, "rate-status", "Rated 5/5 at")
    box(page, "findings").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(" Later words.")
    page.keyboard.press("Control+s")
    wait_text(page, "rate-status", "before your later edits")
    click_row(page, "DEMO-0001")
    click_row(page, "DEMO-0004")
    wait_text(page, "rate-status", "Rated 5/5 at")
    assert "before your later edits" in page.locator("#rate-status").inner_text()
    # words typed, then at once a score and Alt+R: the words are saved first and the score
    # rates them (it was stored against the text before them, and the words' autosave then
    # said the score came "before your later edits": a new-user trial, 5 of 5)
    box(page, "findings").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(" Rated at once.")
    page.keyboard.press("Escape")
    page.keyboard.press("Digit4")
    # (the score key counts though pressed within a second of the study opening: it was
    # swallowed as keys typed on from the study left, 3 runs in 8, and the rating went out
    # with the old score)
    page.wait_for_function("() => document.querySelector('#likert input:checked')?.value"
                           " === '4'")
    page.keyboard.press("Alt+r")
    wait_text(page, "rate-status", "Rated 4/5 at")
    assert latest_text(app, "DEMO-0004", "findings").endswith("Later words. Rated at once.")
    ((rated, saved),) = app.query(
        "SELECT (SELECT MAX(created_at) FROM rating), (SELECT MAX(created_at) FROM revision)")
    assert rated >= saved
    page.wait_for_timeout(1500)  # (the next autosave tick finds nothing left to save)
    assert "before your later edits" not in page.locator("#rate-status").inner_text()


def table_rows(page, elem_id: str) -> list[list[str]]:
    """A Gradio table's rows as shown (its visible body cells, by data-row and data-col)."""
    return page.evaluate(
        """(id) => { const rows = {};
             for (const c of document.querySelectorAll(`#${id} .body-cell[data-row]`)) {
               if (!c.offsetParent) continue;
               const r = +c.dataset.row, k = +c.dataset.col;
               (rows[r] = rows[r] || [])[k] = c.innerText.trim(); }
             return Object.keys(rows).sort((a, b) => a - b).map((r) => rows[r]); }""",
        elem_id)


def test_an_autosave_updates_the_worklist_row_and_the_metrics_panel(browser, app):
    """Found in a new-user trial: after an autosave the row still said "drafted" and the
    metrics panel still scored the draft against itself, until Ctrl+S or a reload."""
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0004")
    press_draft(page)
    wait_value(page, "findings", "v.length > 20")

    def status_cell() -> str:
        return next((r[2] for r in table_rows(page, "worklist") if "DEMO-0004" in r[1]), "")

    def findings_draft_vs_final() -> list[str] | None:
        return next((r[2:] for r in table_rows(page, "metrics-panel")
                     if r[:2] == ["findings", "draft vs final"]), None)

    wait_until(findings_draft_vs_final, "the metrics panel to score the draft")
    before = findings_draft_vs_final()
    assert before and all(float(v) == 1.0 for v in before)  # the draft against itself
    assert "in review" not in status_cell()
    type_into(page, "findings", "Entirely different words typed by the reader here.")
    wait_text(page, "save-status", "(autosave)")  # the timer saved it; no Save pressed
    wait_until(lambda: "in review" in status_cell(), "the row to say in review")
    wait_until(lambda: findings_draft_vs_final() not in (None, before),
               "the metrics panel to score the autosaved text")
    after = findings_draft_vs_final()
    assert after and all(float(v) < 1.0 for v in after), after
    assert status_of(app, "DEMO-0004")[0] == "in_review"
    # a Revert stores the draft back: the panel follows at once (it went on scoring the
    # reverted words until the study was opened again: a new-user trial)
    page.locator("#revert").click()
    page.wait_for_function("() => !document.querySelector('#revert-confirm').disabled")
    page.locator("#revert-confirm").click()
    wait_until(lambda: (now := findings_draft_vs_final()) is not None
               and all(float(v) == 1.0 for v in now), "the metrics panel to score the draft "
               "put back", timeout=30)


def test_revert_asks_first_and_keeps_the_readers_words_in_the_history(browser, app):
    """Found in new-user trials: Revert replaced both boxes with the draft at once, and what
    the reader had typed since the last save was gone (it is stored first now); then that
    Revert, beside Save, replaced the reader's text in one click with no undo on the page.
    Over the reader's own text it asks first now, as Accept does; Cancel keeps the text."""
    page = new_page(browser, app.url)
    click_row(page, "DEMO-0004")
    press_draft(page)
    wait_value(page, "findings", "v.length > 20")
    draft = box(page, "findings").input_value()
    words = "Words the reader typed and did not save."
    type_into(page, "findings", words)
    # one question at a time: Accept asks over the reader's text, and Revert's question takes
    # its place (a new-user trial: both rows stacked, Submit rating below the fold)
    page.locator("#accept").click()
    page.wait_for_function("() => !document.querySelector('#accept-confirm').disabled")
    page.locator("#revert").click()
    # asked: its buttons are on. (Beside two busy processes a tick sent while the words were
    # typed was answered after the question and put "saved as revision 2 (autosave)" in its
    # place in the status line; the buttons still ask.)
    expect_enabled = "() => !document.querySelector('#revert-confirm').disabled"
    page.wait_for_function(expect_enabled)
    assert page.evaluate("() => document.querySelector('#accept-confirm').disabled")
    status = page.locator("#save-status").inner_text()
    assert "Revert over your own text?" in status or "(autosave)" in status, status
    # typing on while asked: its autosave's note goes above the question, which stays (a
    # new-user trial saw the note take its place, the buttons left with no question)
    box(page, "findings").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(" More.")
    words += " More."
    wait_until(lambda: latest_text(app, "DEMO-0004", "findings") == words, "the autosave")
    page.wait_for_function("() => { const t = document.querySelector('#save-status').innerText;"
                           " return t.includes('(autosave)')"
                           " && t.includes('Revert over your own text?'); }")
    page.locator("#revert-cancel").click()
    page.wait_for_function("() => document.querySelector('#revert-confirm').disabled")
    # "Not reverted: your text stays." (beside two busy processes, that same tick's line came
    # after the Cancel's and stayed: the question is closed all the same)
    page.wait_for_function("() => /Not reverted|\\(autosave\\)/.test("
                           "document.querySelector('#save-status').innerText)")
    assert box(page, "findings").input_value() == words
    page.locator("#revert").click()
    page.wait_for_function(expect_enabled)
    page.locator("#revert-confirm").click()
    wait_value(page, "findings", f"v === {json.dumps(draft)}")
    wait_text(page, "save-status", "in the history")  # (stored now, or by a tick before)
    page.wait_for_function("() => document.querySelector('#revert-confirm').disabled")
    texts = [t for (t,) in app.query("SELECT text FROM revision WHERE section = 'findings' "
                                     "ORDER BY number")]
    # the reader's words are a revision (a tick may have stored part of them while typing);
    # the draft put back may already be stored on top of them by the next autosave
    assert texts[-1] == words or texts[-2:] == [words, draft], texts
    wait_until(lambda: latest_text(app, "DEMO-0004", "findings") == draft,
               "the reverted text to be autosaved")


def test_a_failed_draft_is_shown_beside_the_boxes_never_in_them(browser, tmp_path,
                                                                 database_templates):
    presets = tmp_path / "broken.json"
    presets.write_text(json.dumps({"broken": {
        "backend": "vision-encoder-decoder", "description": "a model that is not here",
        "models": {"findings": {"model_id": "example-org/not-in-the-cache"},
                   "impression": {"model_id": "example-org/not-in-the-cache"}}}}))
    running = App(demo_copy(database_templates, tmp_path / "failed.sqlite"),
                  "--presets", str(presets), "--model", "broken", "--no-predraft")
    try:
        page = new_page(browser, running.url)
        click_row(page, "DEMO-0002")
        type_into(page, "findings", "The reader's findings.")
        page.locator("#draft-button").click()
        wait_text(page, "draft-error", "Draft failed", timeout=120_000)
        assert "not-in-the-cache" in page.locator("#draft-error").inner_text()
        # a failed draft offers no new draft (the status said "The new draft is beside your
        # text" under "Draft failed": a fourth new-user trial)
        wait_text(page, "save-status", "No new draft; your text is kept.")
        assert "beside" not in page.locator("#save-status").inner_text()
        assert box(page, "findings").input_value() == "The reader's findings."
        assert box(page, "impression").input_value() == ""
        # the reader's text was kept as a revision; no error text ever became one
        texts = [t for (t,) in running.query("SELECT text FROM revision ORDER BY id")]
        assert texts[-1] == "The reader's findings."  # (autosaves may have caught typing)
        page.locator("#save").click()
        wait_text(page, "save-status", "Everything is saved (findings revision")
        assert not [t for (t,) in running.query("SELECT text FROM revision")
                    if "fail" in t.lower()]
        # with no draft there is nothing for the score to rate: refused, and said why (a
        # rating the evaluation then left out unseen: second new-user trial)
        page.locator("#film-head").click()
        page.keyboard.press("Digit3")
        page.locator("#rate").click()
        wait_text(page, "rate-status", "no draft")
        assert running.query("SELECT COUNT(*) FROM rating") == [(0,)]
    finally:
        running.stop(tracebacks=True)  # the model's failure is logged with its traceback


SCREENS = [(1366, 768), (1920, 1080), (2560, 1440)]


def film_geometry(page) -> dict:
    """Where the film image is drawn (object-fit: contain) and the other big elements."""
    return page.evaluate("""() => {
      const img = document.querySelector('#film .current img');
      const r = img.getBoundingClientRect();
      const s = Math.min(r.width / img.naturalWidth, r.height / img.naturalHeight);
      const w = img.naturalWidth * s, h = img.naturalHeight * s;
      const drawn = {x: r.x + (r.width - w) / 2, y: r.y + (r.height - h) / 2, w, h};
      const area = (sel) => { const e = document.querySelector(sel); if (!e) return 0;
        const b = e.getBoundingClientRect();
        const vw = Math.max(0, Math.min(b.right, innerWidth) - Math.max(b.left, 0));
        const vh = Math.max(0, Math.min(b.bottom, innerHeight) - Math.max(b.top, 0));
        return vw * vh; };
      const bottom = (sel) => document.querySelector(sel).getBoundingClientRect().bottom;
      let el = document.querySelector('#main-row'), bg = 'rgba(0, 0, 0, 0)';
      while (el && (bg === 'rgba(0, 0, 0, 0)' || bg === 'transparent')) {
        bg = getComputedStyle(el).backgroundColor; el = el.parentElement; }
      return {drawn, film: drawn.w * drawn.h,
              others: {worklist: area('#worklist'), findings: area('#edit-findings'),
                       impression: area('#edit-impression'), rating: area('#rating'),
                       rexval: area('#rexval'), reference: area('#reference'),
                       metrics: area('#metrics')},
              save: bottom('#save'), rate: bottom('#rate'), likert: bottom('#likert'),
              column: bottom('#editor-col'), bg,
              vw: innerWidth, vh: innerHeight};
    }""")


@pytest.mark.parametrize(("width", "height"), SCREENS)
def test_reading_room_layout(browser, app, width, height):
    page = new_page(browser, app.url, width, height)
    click_row(page, "DEMO-0003")
    page.wait_for_function("() => { const i = document.querySelector('#film .current img');"
                           " return i && i.complete && i.naturalWidth > 0; }")
    g = film_geometry(page)
    d = g["drawn"]
    # the whole film is visible (contained, never cropped) and the largest thing on screen
    assert d["x"] >= 0 and d["y"] >= 0 and d["x"] + d["w"] <= g["vw"] + 1
    assert d["y"] + d["h"] <= g["vh"] + 1
    assert g["film"] > max(g["others"].values()), g
    assert g["film"] > 0.2 * g["vw"] * g["vh"], g
    # dark by default
    rgb = [int(x) for x in g["bg"][g["bg"].index("(") + 1:-1].split(",")[:3]]
    assert sum(rgb) < 3 * 80, g["bg"]
    # Save, the Likert score and Submit rating are reachable without scrolling (the issue asks
    # it at 1920x1080; a new-user trial at 1366x768 too): inside the window and inside the
    # editor column's own scroll area, on first view
    for item in ("save", "likert", "rate"):
        assert g[item] <= min(height, g["column"]) + 1, (item, g)
    # the worklist is readable: no cell is cut off, the table fits its column
    cut = page.evaluate("""() => {
      const t = document.querySelector('#worklist table');
      const col = document.querySelector('#worklist-col').getBoundingClientRect();
      const cells = [...t.querySelectorAll('th, td')].filter(c => c.offsetParent);
      return {cut: cells.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.innerText),
              right: t.getBoundingClientRect().right, col: col.right, n: cells.length}; }""")
    assert cut["n"] >= 4 and not cut["cut"] and cut["right"] <= cut["col"] + 1, cut
    # so are the study's metrics: every column inside the panel (at 1366 px rougeL lay
    # beyond its edge, to be scrolled to), no cell cut
    page.wait_for_function("() => document.querySelector('#metrics-panel')?.innerText"
                           ".includes('rougeL')")
    # (the table lays its columns out again after its values arrive: a CI run measured the
    # first layout, rougeL past the edge at 1920 px, so the check waits for the settled one)
    settled = """() => {
      const panel = document.querySelector('#metrics-panel');
      const t = panel.querySelector('table'), edge = panel.getBoundingClientRect().right;
      const heads = [...t.querySelectorAll('th')].filter(c => c.offsetParent);
      const cells = [...t.querySelectorAll('th .cell-wrap, td .cell-wrap')]
        .filter(c => c.offsetParent);
      return {outside: heads.filter(h => h.getBoundingClientRect().right > edge + 1)
                            .map(h => h.innerText),
              cut: cells.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.innerText),
              n: heads.length}; }"""
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(f"() => {{ const m = ({settled})();"
                               " return m.n >= 4 && !m.outside.length && !m.cut.length; }",
                               timeout=10_000)
    metrics = page.evaluate(settled)
    assert metrics["n"] >= 4 and not metrics["outside"] and not metrics["cut"], metrics
    # the word diff breaks lines between words only ("co ntours" at 2560: issue #21, defect 9)
    box(page, "findings").click()
    page.keyboard.press("Control+End")
    page.keyboard.type(" The cardiomediastinal contours are unremarkable and symmetrical,"
                       " without pneumomediastinum or subcutaneous emphysema.")
    page.wait_for_function("() => document.querySelector('#diff').innerText"
                           ".includes('emphysema')")
    assert split_words(page, "#diff .textfield") == []
    if width == 1366:
        # 1366 px at 125 % zoom (1093 CSS px) and a 1024 px screen: the editor ran 50-120 px
        # past the right edge, its buttons cut off (a new-user trial); the film gives way
        for narrow in (1093, 1024):
            page.set_viewport_size({"width": narrow, "height": 614})
            page.wait_for_function(
                "(w) => document.querySelector('#editor-col').getBoundingClientRect().right"
                " <= w + 1", arg=narrow, timeout=10_000)
            edges = page.evaluate("""() => Object.fromEntries(
                ['#editor-col', '#save', '#accept', '#viewer-col', '#worklist-col'].map(
                  (s) => { const b = document.querySelector(s).getBoundingClientRect();
                           return [s, [Math.round(b.left), Math.round(b.right)]]; }))""")
            assert all(right <= narrow + 1 for _, right in edges.values()), (narrow, edges)
            film = edges["#viewer-col"]
            assert film[1] - film[0] >= 300, (narrow, edges)


def split_words(page, selector: str) -> list[str]:
    """The words under `selector` that are drawn across two lines."""
    return page.evaluate("""(sel) => {
      const split = [], root = document.querySelector(sel);
      const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode())
        for (const m of n.data.matchAll(/\\S+/g)) {
          const r = document.createRange();
          r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
          const tops = new Set([...r.getClientRects()].map(b => Math.round(b.top)));
          if (tops.size > 1) split.push(m[0]);
        }
      return split; }""", selector)


def unsaved_marks(page) -> set[str]:
    """Where the page marks typing the server has not stored (page.css): "save" (the Save
    button's dot) and each section whose box label says "not saved yet"."""
    return set(page.evaluate("""() => {
        const after = (el) => el ? getComputedStyle(el, '::after').content : 'none';
        const marked = (el) => !['none', 'normal', ''].includes(after(el));
        return [['save', '#save'],
                ['findings', '#edit-findings [data-testid="block-info"]'],
                ['impression', '#edit-impression [data-testid="block-info"]']]
          .filter(([, sel]) => marked(document.querySelector(sel))).map(([name]) => name);
    }"""))


def test_save_says_where_both_sections_stand(browser, app):
    """Findings autosaved a moment before, then the impression typed and Ctrl+S: the status
    said only "impression saved", and the reader took the findings for unsaved (issue #21,
    defect 9)."""
    page = new_page(browser, app.url, 1366, 768)
    click_row(page, "DEMO-0003")
    assert unsaved_marks(page) == set()
    type_into(page, "findings", "Findings typed first.")
    # typing not stored yet marks Save and its box (the status line kept "Editing your
    # revision N"), unless an autosave tick stored it the moment the last key went
    marks = unsaved_marks(page)
    assert marks == {"save", "findings"} or (
        latest_text(app, "DEMO-0003", "findings") == "Findings typed first."), marks
    wait_until(lambda: latest_text(app, "DEMO-0003", "findings") == "Findings typed first.",
               "the findings' autosave")
    wait_until(lambda: unsaved_marks(page) == set(), "the marks to go once it is stored")
    type_into(page, "impression", "Impression typed next.")
    marks = unsaved_marks(page)  # (the findings, stored, are not marked)
    assert marks == {"save", "impression"} or (
        latest_text(app, "DEMO-0003", "impression") == "Impression typed next."), marks
    tops = [box(page, s).bounding_box()["y"] for s in ("findings", "impression")]
    page.keyboard.press("Control+s")
    # the Save's answer names both sections: "impression saved ...; findings already saved",
    # or, where an autosave tick stored the impression first (beside busy processes), the
    # Save's "Everything is saved (findings revision 1, impression revision 1)"
    wait_until(lambda: any(both in page.locator("#save-status").inner_text()
                           for both in ("findings already saved",
                                        "Everything is saved (findings revision")),
               "the Save's answer naming both sections")
    wait_until(lambda: unsaved_marks(page) == set(), "the marks to go once both are stored")
    # the answer takes two lines of the 1366-px column and nothing under the cursor moved
    # (the boxes went 23 px down, and up again with the next one-line status: a trial)
    assert [box(page, s).bounding_box()["y"] for s in ("findings", "impression")] == tops


def _frontal_and_lateral_dataset(root) -> None:
    """A ReXGradient-style dataset with one study holding a PA and a LATERAL radiograph
    (16-bit PNGs of different shapes, so each must be fitted on its own), and the same
    patient's prior with the PA alone."""
    import numpy as np
    from PIL import Image

    (root / "metadata").mkdir(parents=True)
    (root / "deid_png" / "P1").mkdir(parents=True)
    for name, (h, w) in {"pa": (1100, 900), "lat": (1000, 1000)}.items():
        y, x = np.mgrid[0:h, 0:w]
        pixels = ((np.sin(x / 37.0) + np.cos(y / 53.0) + 2) * 16000).astype(np.uint16)
        Image.fromarray(pixels).save(root / "deid_png" / "P1" / f"{name}.png")
    (root / "metadata" / "test_metadata_view_position.json").write_text(json.dumps({
        "pP1_aA1_s1": {"PatientID": "P1", "AccessionNumber": "A1", "StudyDate": 20240102,
                       "Findings": "No acute findings.", "Impression": "Normal chest.",
                       "ImagePath": ["../deid_png/P1/lat.png", "../deid_png/P1/pa.png"],
                       "ImageViewPosition": ["LATERAL", "PA"]},
        "pP1_aA2_s2": {"PatientID": "P1", "AccessionNumber": "A2", "StudyDate": 20230102,
                       "Findings": "Clear lungs.", "Impression": "Normal.",
                       "ImagePath": ["../deid_png/P1/pa.png"], "ImageViewPosition": ["PA"]}}))


def test_frontal_and_lateral_are_side_by_side_and_whole(browser, tmp_path):
    """A study with a PA and a lateral image at 1920x1080: both on screen side by side, the
    frontal first, each drawn whole inside its box (never cropped) and inside the viewport."""
    import subprocess
    import sys

    from tests.browser import ROOT

    data, db = tmp_path / "rexgradient", tmp_path / "two-views.sqlite"
    _frontal_and_lateral_dataset(data)
    imported = subprocess.run(
        [sys.executable, "-m", "rrg_review.app.cli", "import", str(data), "--format", "rexgradient",
         "--db", str(db)], capture_output=True, text=True, cwd=ROOT)
    assert imported.returncode == 0, imported.stdout + imported.stderr
    running = App(db, "--no-demo", "--no-predraft")
    try:
        page = new_page(browser, running.url, 1920, 1080)
        page.wait_for_function("() => { const i = [...document.querySelectorAll("
                               "'#film .current img')]; return i.length === 2 && "
                               "i.every(e => e.complete && e.naturalWidth > 0); }")
        figures = page.evaluate("""() => [...document.querySelectorAll('#film .current figure')]
          .map(f => { const img = f.querySelector('img'), r = img.getBoundingClientRect();
            const s = Math.min(r.width / img.naturalWidth, r.height / img.naturalHeight);
            const w = img.naturalWidth * s, h = img.naturalHeight * s;
            return {caption: f.innerText, fit: getComputedStyle(img).objectFit,
                    box: {x: r.x, y: r.y, w: r.width, h: r.height},
                    drawn: {x: r.x + (r.width - w) / 2, y: r.y + (r.height - h) / 2, w, h}}; })""")
        film = page.locator("#film").bounding_box()
        assert [("PA" in f["caption"], "LATERAL" in f["caption"]) for f in figures] == [
            (True, False), (False, True)], figures  # frontal first, then lateral
        pa, lat = figures
        for f in figures:
            d, b = f["drawn"], f["box"]
            assert f["fit"] == "contain", f  # the whole image is drawn inside its box
            assert b["x"] >= film["x"] - 1 and b["x"] + b["w"] <= film["x"] + film["width"] + 1
            assert b["y"] >= film["y"] - 1 and b["y"] + b["h"] <= film["y"] + film["height"] + 1
            assert d["x"] >= 0 and d["y"] >= 0 and d["x"] + d["w"] <= 1920 + 1, f
            assert d["y"] + d["h"] <= 1080 + 1, f
            assert d["w"] * d["h"] > 0.08 * 1920 * 1080, f  # a film, not a thumbnail
        # side by side: the lateral to the right of the frontal, on the same row
        assert lat["box"]["x"] >= pa["box"]["x"] + pa["box"]["w"] - 1, figures
        assert lat["drawn"]["x"] >= pa["drawn"]["x"] + pa["drawn"]["w"] - 1, figures
        assert abs(lat["box"]["y"] - pa["box"]["y"]) < 2, figures
        # the prior beside: the current study's films get at least the prior's room (each
        # was half the prior's size: a fourth new-user trial); the same PA file on both sides
        page.locator("#toggle-prior").click()
        page.wait_for_function("() => { const i = document.querySelector('#prior-panel img');"
                               " return !!i && i.complete && i.naturalWidth > 0; }")
        scale = page.evaluate("""() => [...document.querySelectorAll('#film figure img')]
          .map(img => { const r = img.getBoundingClientRect();
            return [img.closest('.prior') ? 'prior' : 'current', img.alt,
                    Math.min(r.width / img.naturalWidth, r.height / img.naturalHeight)]; })""")
        pas = {side: s for side, alt, s in scale if "PA" in alt}
        assert len(scale) == 3 and set(pas) == {"current", "prior"}, scale
        assert pas["current"] >= 0.95 * pas["prior"], scale
    finally:
        running.stop()


def test_light_theme_is_a_setting_kept_in_the_browser(browser, app):
    page = new_page(browser, app.url)
    assert page.evaluate("document.body.classList.contains('dark')")
    page.locator("#light-theme input").check()
    page.wait_for_function("() => !document.body.classList.contains('dark')")
    page.reload()
    page.locator("#film .current").wait_for()
    page.wait_for_function("() => !document.body.classList.contains('dark')")


def _login(browser, url: str, name: str):
    context = browser.new_context(viewport={"width": 1500, "height": 1000})
    page = context.new_page()
    page.goto(url)
    page.get_by_label("username").fill(name)
    page.get_by_label("password").fill("correct horse battery")
    page.get_by_role("button", name="Login").click()
    page.locator("#reader").get_by_text(name).wait_for()
    return context, page


def test_a_tab_state_is_refused_to_another_login(browser, tmp_path, database_templates):
    """Alice, with her own cookie, sends a save under Bob's tab (his session hash): refused,
    nothing written, and Bob's text is not shown to her."""
    import subprocess
    import sys

    from tests.browser import ROOT

    # drafted: what is tested here is the tab's owner, not the pre-drafter (with an undrafted
    # copy a CI run's draft, stored 3 s after start, never reached the page in 60 s: left
    # open in the closing note of session 30)
    db = demo_copy(database_templates, tmp_path / "two.sqlite", kind="drafted")
    for name in ("alice", "bob"):
        add = subprocess.run(
            [sys.executable, "-m", "rrg_review.app.cli", "readers", "add", name, "--password-stdin",
             "--db", str(db)], input="correct horse battery\n", capture_output=True, text=True,
            cwd=ROOT)
        assert add.returncode == 0, add.stderr
    running = App(db, "--login")
    try:
        bob_context, bob = _login(browser, running.url, "bob")
        hashes: list[str] = []

        def record(request) -> None:
            if request.method == "POST" and "/gradio_api/" in request.url:
                body = request.post_data_json or {}
                if isinstance(body, dict) and body.get("session_hash"):
                    hashes.append(body["session_hash"])

        bob.on("request", record)
        click_row(bob, "DEMO-0003")
        # an admin's button is not a reader's (a trial's reader clicked it: "Error")
        assert bob.locator("#unload-model").count() == 0 \
            or not bob.locator("#unload-model").is_visible()
        wait_value(bob, "impression", "v.length > 20")  # (the draft: typed over, as a reader does)
        type_into(bob, "impression", "Bob's private impression.")
        bob.locator("#save").click()
        wait_text(bob, "save-status", "impression")  # saved (or already autosaved)
        wait_until(lambda: running.query("SELECT text FROM revision ORDER BY id DESC LIMIT 1")
                   == [("Bob's private impression.",)], "bob's revision")
        assert hashes
        alice_context, alice = _login(browser, running.url, "alice")
        click_row(alice, "DEMO-0003")
        answers: list[tuple[int, str]] = []  # (status, body) of each request sent as bob's tab

        def as_bob(route) -> None:
            body = route.request.post_data_json
            if isinstance(body, dict) and "session_hash" in body:
                body["session_hash"] = hashes[-1]
                # the answer to this very request (a response matched by URL alone could be
                # the late answer of a request sent before the route, under load: a CI flake)
                try:
                    answer = route.fetch(post_data=json.dumps(body))
                    text = answer.text()
                except Exception:  # (the app stopped under a still-open page, or the answer
                    route.abort()  # was disposed with it, under load: test over)
                    return
                answers.append((answer.status, text))
                route.fulfill(response=answer)
            else:
                route.continue_()

        alice.route("**/gradio_api/**", as_bob)
        type_into(alice, "impression", "Alice writing into Bob's tab.")
        sent_before = len(answers)
        alice.locator("#save").click()
        deadline = time.monotonic() + 60
        while len(answers) <= sent_before:  # (the route runs while Playwright is waited on)
            assert time.monotonic() < deadline, "the save sent under bob's tab never came"
            alice.wait_for_timeout(100)
        # (the route stays until alice's page closes: her page retries its refused autosave,
        # which would otherwise land under her own tab, as it should, racing the check below)
        assert answers and all(status == 403 and "belongs to another reader" in text
                               for status, text in answers), answers
        texts = running.query("SELECT rd.name, r.text FROM revision r "
                              "JOIN reader rd ON rd.id = r.reader_id ORDER BY r.id")
        # (bob's autosaves may have caught his typing midway; alice wrote nothing)
        assert {n for n, _ in texts} == {"bob"} and texts[-1][1] == "Bob's private impression."
        assert "Bob's private" not in alice.locator("body").inner_text()
        # a forged request still on its way when the context closes would fail in the route
        # (its answer disposed with the context), and Playwright raises that from the close:
        # an error of the test's own tooling, seen once in a full run
        alice.unroute_all(behavior="ignoreErrors")
        alice_context.close()
        bob_context.close()
    finally:
        running.stop()


def test_a_draft_whose_wait_was_refused_still_reaches_the_page(browser, tmp_path,
                                                               database_templates):
    """The quiet clean-clone run of session 30: a study opened before its pre-draft said
    "Drafting this study…" for 60 s beside a draft stored 3 s after start. The page waits for
    it in a request of its own (the change of `Tab.wanted`); one that never ran (refused as
    the fair limiter refuses, or dropped by Gradio) left it so for good. Made certain here:
    the first wait is refused with 429. The autosave tick asks again once the draft is done,
    and it lands in the boxes. (Logins: nothing is pre-drafted before the first page, so the
    study that opens first has no draft.)"""
    import subprocess
    import sys

    from tests.browser import ROOT, join_body

    db = demo_copy(database_templates, tmp_path / "wait.sqlite")  # undrafted
    add = subprocess.run(
        [sys.executable, "-m", "rrg_review.app.cli", "readers", "add", "carol",
         "--password-stdin", "--db", str(db)], input="correct horse battery\n",
        capture_output=True, text=True, cwd=ROOT)
    assert add.returncode == 0, add.stderr
    running = App(db, "--login")
    try:
        context = browser.new_context(viewport={"width": 1500, "height": 1000})
        waits: list[int] = []  # the fn_index of the page's wait for a draft (from its config)
        refused: list[int] = []

        def refuse_first_wait(route) -> None:
            body = join_body(route.request)
            if body is not None and not waits:
                config = context.request.get(running.url + "config").json()
                deps = {d["id"]: d for d in config["dependencies"]}
                waits.extend(d["trigger_after"] for d in deps.values()
                             if "rrgDraftAsked" in (d.get("js") or "")
                             and d.get("trigger_after") in deps
                             and deps[d["trigger_after"]]["targets"][0][1] == "change")
            if body is not None and body.get("fn_index") in waits and not refused:
                refused.append(body["fn_index"])
                message = SLOW_DOWN.format(what="tab", n=12)
                route.fulfill(status=429, content_type="application/json",
                              body=json.dumps({"detail": message, "error": message}))
                return
            route.continue_()

        context.route("**/gradio_api/**", refuse_first_wait)
        page = context.new_page()
        page.goto(running.url)
        page.get_by_label("username").fill("carol")
        page.get_by_label("password").fill("correct horse battery")
        page.get_by_role("button", name="Login").click()
        pump_until(page, lambda: refused, "the page's first wait for its draft",
                   detail=lambda: page.locator("#save-status").inner_text())
        pump_until(page, lambda: len(box(page, "findings").input_value()) > 20,
                   "the draft in the boxes", timeout=90,
                   detail=lambda: page.locator("#save-status").inner_text())
        assert "Showing the draft" in page.locator("#save-status").inner_text()
        context.unroute_all(behavior="ignoreErrors")
        context.close()
    finally:
        running.stop()


def test_a_search_naming_a_whole_key_opens_that_study_among_longer_ones(browser, app):
    """Found in a new-user trial: "CXR1" found CXR1, CXR10 ... CXR199 and opened nothing (only
    a search finding one study opened it). The study whose whole key is the text (in any
    case) opens; a text that is only the start of several keys still opens none."""
    from rrg_review.db.sorting import natural_key

    with sqlite3.connect(app.db) as con:  # a key that starts with another study's key
        con.execute("UPDATE study SET study_key = 'DEMO-00021', sort_key = ? WHERE study_key"
                    " = 'DEMO-0003'", (natural_key("DEMO-00021"),))
    page = new_page(browser, app.url)
    search = page.locator("#worklist-search textarea, #worklist-search input").first
    assert key_on_screen(page) == "DEMO-0001"

    def keys() -> list[str]:
        return [r[1] for r in table_rows(page, "worklist")]

    search.fill(" demo-0002 ")
    search.press("Enter")
    wait_until(lambda: keys() == ["DEMO-0002", "DEMO-00021"], "the two keys found")
    wait_text(page, "film-head", "DEMO-0002")
    page.wait_for_function("() => !window.rrgLeaving()")
    assert key_on_screen(page) == "DEMO-0002"
    search.fill("DEMO-000")
    search.press("Enter")
    wait_until(lambda: len(keys()) == 4, "every row")
    page.wait_for_timeout(1500)  # (what would open one is the page's own step after the answer)
    assert key_on_screen(page) == "DEMO-0002"


def test_the_worklist_shows_every_row_again_after_a_search_with_no_match(browser, app):
    """Found in a new-user trial: a search with no match, then one with one match, then the
    whole list again showed one row under "1-4 of 4" until the page was reloaded (the table's
    virtual window was read only once). The status filter did the same.

    Enter on a search that finds one study opens it (a trial typed a study key, pressed
    Enter and waited for the study), saving what was typed first; none found, several, or
    the open study alone open nothing."""
    page = new_page(browser, app.url)
    search = page.locator("#worklist-search textarea, #worklist-search input").first
    assert key_on_screen(page) == "DEMO-0001"
    type_into(page, "findings", "Typed before the search.")

    def keys() -> list[str]:
        return [r[1] for r in table_rows(page, "worklist")]

    everything = ["DEMO-0001", "DEMO-0002", "DEMO-0003", "DEMO-0004"]
    for term, shown, opened in (("zzz", [], "DEMO-0001"),
                                ("DEMO-0002", ["DEMO-0002"], "DEMO-0002"),
                                ("", everything, "DEMO-0002"),
                                ("DEMO-0002", ["DEMO-0002"], "DEMO-0002")):  # open already
        search.fill(term)
        search.press("Enter")
        wait_until(lambda shown=shown: keys() == shown, f"the rows {shown}")
        wait_text(page, "film-head", opened)
        page.wait_for_function("() => !window.rrgLeaving()")
        # the study opened (or stayed) with its metrics scored: nothing is on its way
        page.wait_for_function("() => document.querySelector('#metrics-panel')?.innerText"
                               ".includes('rougeL')")
        assert key_on_screen(page) == opened, term
    assert latest_text(app, "DEMO-0001", "findings") == "Typed before the search."
    search.fill("")
    search.press("Enter")
    wait_until(lambda: keys() == everything, "every row")
    assert key_on_screen(page) == "DEMO-0002"
    # an empty search box is no search: Enter in it, with a filter that leaves one study on
    # the list, opens nothing (it opened that study: a new-user trial)
    page.locator("#status-filter input").click()
    page.locator("#status-filter input").fill("in review")
    page.locator("#status-filter input").press("Enter")
    wait_until(lambda: keys() == ["DEMO-0001"], "DEMO-0001 alone, in review")
    search.press("Enter")
    page.wait_for_timeout(1500)  # (what would open it is the page's own step after the answer)
    assert key_on_screen(page) == "DEMO-0002" and keys() == ["DEMO-0001"]
    page.locator("#status-filter input").fill("all")
    page.locator("#status-filter input").press("Enter")
    wait_until(lambda: keys() == everything, "every row")
    # quick row clicks: the last one wins, also while the first is on its way (a tenth
    # new-user trial, on a slow link: Gradio ran a row's select once at a time and dropped the
    # clicks meanwhile; an eleventh: the progress overlay over the list took the clicks made
    # while a study opened, 15 of 32 bursts). Clicked where the rows are, as a reader's mouse
    # does (Playwright's own click waits until nothing covers the row).
    where = {key: page.get_by_text(key, exact=True).filter(visible=True).first.bounding_box()
             for key in ("DEMO-0001", "DEMO-0002", "DEMO-0003", "DEMO-0004")}
    held: list = []
    page.route(re.compile(r"/gradio_api/queue/join"),
               lambda route: held.append(route) if not held else route.continue_())
    for key in ("DEMO-0003", "DEMO-0001", "DEMO-0004"):
        box = where[key]
        page.mouse.click(box["x"] + 4, box["y"] + box["height"] / 2)
        page.wait_for_timeout(200)
    # (a clean-clone run: no join within the 600 ms of the clicks; the page sends it late)
    pump_until(page, lambda: held, "the first click's request, held")
    held[0].continue_()
    page.locator("#film-head").get_by_text("DEMO-0004").wait_for()
    page.wait_for_timeout(1000)  # and it stays there
    assert "DEMO-0004" in page.locator("#film-head").inner_text()
    assert open_row(page) == "DEMO-0004"  # the list marks the open study's row
    # the mark follows Next (Alt+N) too, not only a click (the list marked only the row
    # clicked, and nothing after Next, Previous or a reload)
    page.locator("#film-head").click()
    page.keyboard.press("Alt+p")
    page.locator("#film-head").get_by_text("DEMO-0003").wait_for()
    wait_until(lambda: open_row(page) == "DEMO-0003", "the mark after Alt+P")
    # ↑ ↓ move the list's selected row and open nothing; Enter opens it, as a click does (a
    # new-user trial pressed them as in a PACS list, and nothing happened)
    page.get_by_text("DEMO-0003", exact=True).filter(visible=True).first.click()
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    page.wait_for_timeout(500)
    assert "DEMO-0003" in page.locator("#film-head").inner_text()
    page.keyboard.press("Enter")
    page.locator("#film-head").get_by_text("DEMO-0001").wait_for()
    wait_until(lambda: open_row(page) == "DEMO-0001", "the mark after Enter")
    # a double-click on Next is one step (its second click passed DEMO-0002 without a word:
    # a new-user trial, 3 of 3)
    page.wait_for_function("() => !window.rrgLeaving()")
    page.locator("#next-study").dblclick()
    page.locator("#film-head").get_by_text("DEMO-0002").wait_for()
    page.wait_for_timeout(1500)  # and nothing follows it
    assert "DEMO-0002" in page.locator("#film-head").inner_text()


def open_row(page) -> str | None:
    """The study key in the worklist row marked as the open one (None if no row is)."""
    return page.evaluate("""() => { const c = document.querySelector(
        '#worklist .body-cell.rrg-open[data-col="1"]'); return c ? c.innerText.trim() : null; }""")


def test_the_worklist_follows_next_and_previous_to_the_study_s_page(browser, tmp_path):
    """Found in a new-user trial on the 3,955 Open-i studies: Next went on through the list
    while the table stayed on page 1."""
    from bench.synthetic import SyntheticImage, add_studies
    from rrg_review.db.engine import open_database
    from tests.conftest import rg1

    db_path = tmp_path / "many.sqlite"
    db = open_database(db_path)
    add_studies(db, 55, image=SyntheticImage(rg1(), 1955, 1841))  # page 1: 1-50, page 2: 51-55
    db.dispose()
    running = App(db_path, "--no-demo", "--no-predraft")
    try:
        page = new_page(browser, running.url)
        assert key_on_screen(page) == "CXR1"
        wait_text(page, "worklist-page-label", "page 1 / 2")
        page.locator("#film-head").click()
        page.keyboard.press("Alt+p")  # round the start of the list to the last study
        wait_until(lambda: key_on_screen(page) == "CXR55", "the last study")
        wait_text(page, "save-status", "Past the start of the list")  # (it said nothing)
        wait_text(page, "worklist-page-label", "page 2 / 2")
        assert "CXR55" in [r[1] for r in table_rows(page, "worklist")]
        page.locator("#film-head").click()
        page.keyboard.press("Alt+n")  # round the end back to the first
        wait_until(lambda: key_on_screen(page) == "CXR1", "the first study")
        wait_text(page, "save-status", "Past the end of the list")
        wait_text(page, "worklist-page-label", "page 1 / 2")
        page.keyboard.press("Alt+n")  # an ordinary step says nothing of the kind
        wait_until(lambda: key_on_screen(page) == "CXR2", "the second study")
        assert "Past the" not in page.locator("#save-status").inner_text()
        # Next from the list's last row in view: the list scrolls to show the study opened
        # (the mark went on down the page's 50 rows out of sight: a new-user trial)
        last, after = page.evaluate(LAST_ROW_IN_VIEW)
        assert after, "the whole page of the list is in view: nothing to scroll"
        click_row(page, last)
        page.locator("#film-head").click()
        page.keyboard.press("Alt+n")
        wait_until(lambda: key_on_screen(page) == after, after)
        wait_until(lambda: page.evaluate(OPEN_ROW_IN_VIEW), f"{after}'s row in the list's view")
    finally:
        running.stop()


# the study keys of the worklist's last row wholly in its view and of the row after it
LAST_ROW_IN_VIEW = """() => {
  const view = document.querySelector('#worklist .virtual-table-viewport').getBoundingClientRect();
  const keys = [...document.querySelectorAll('#worklist .body-cell[data-row][data-col="1"]')]
    .filter((c) => c.offsetParent).sort((a, b) => a.dataset.row - b.dataset.row);
  const i = keys.findLastIndex((c) => c.getBoundingClientRect().bottom <= view.bottom + 1);
  return [keys[i].innerText.trim(), keys[i + 1] ? keys[i + 1].innerText.trim() : null]; }"""
OPEN_ROW_IN_VIEW = """() => {
  const cell = document.querySelector('#worklist .body-cell.rrg-open[data-col="1"]');
  const view = document.querySelector('#worklist .virtual-table-viewport');
  if (!cell || !view) return false;
  const row = cell.getBoundingClientRect(), box = view.getBoundingClientRect();
  return row.top >= box.top - 1 && row.bottom <= box.bottom + 1; }"""


def test_an_empty_worklist_says_report_only_studies_are_left_off(browser, tmp_path):
    """Found in a new-user trial: after importing Open-i's 3,955 reports (no images) the
    worklist was empty with no word why; the reader took it for a failed import."""
    from bench.synthetic import add_studies
    from rrg_review.db.engine import open_database

    db_path = tmp_path / "refs.sqlite"
    db = open_database(db_path)
    add_studies(db, 3, report_only_every=1)  # references only
    db.dispose()
    running = App(db_path, "--no-demo", "--no-predraft")
    try:
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(running.url)
        wait_text(page, "save-status", "3 stored studies have no images")
        assert "--include-report-only" in page.locator("#save-status").inner_text()
    finally:
        running.stop()


# how many unsaved-text entries of this browser's storage hold the words saved first
STORED_JS = ("Object.entries(localStorage).filter(([k, v]) => k.startsWith('rrg:') && "
             "v.includes('Saved before')).length")
# the id of the Log out event (the one page.js `rrgLogout` follows)
LOGOUT_EVENT_JS = ("window.gradio_config.dependencies.find((d) => (d.js || '')"
                   ".includes('rrgLogout')).trigger_after")


def test_a_tab_signed_out_elsewhere_says_so_when_it_saves(browser, tmp_path,
                                                          database_templates):
    """Found in a third new-user trial: after Log out in one tab, Save in another tab of the
    same browser did nothing visible (every request refused with 401, nothing shown). And a
    refusal keeps no copy of text the server already has (a loaded run: a saved patient's
    words were written back to the browser's storage by a 401 that came while Log out was
    leaving the page)."""
    import subprocess
    import sys

    from tests.browser import ROOT

    db = demo_copy(database_templates, tmp_path / "out.sqlite")
    add = subprocess.run(
        [sys.executable, "-m", "rrg_review.app.cli", "readers", "add", "alice", "--password-stdin",
         "--db", str(db)], input="correct horse battery\n", capture_output=True, text=True,
        cwd=ROOT)
    assert add.returncode == 0, add.stderr
    running = App(db, "--login", "--no-predraft")
    try:
        context, first = _login(browser, running.url, "alice")
        second = context.new_page()
        second.goto(running.url)
        second.locator("#film [data-study]").first.wait_for(timeout=60_000)
        saved = "Saved before the other tab logged out."
        type_into(second, "findings", saved)
        second.keyboard.press("Control+s")

        def stored(section: str) -> list[str]:  # (one study is edited here)
            return [t for (t,) in running.query(
                "SELECT text FROM revision WHERE section = ? ORDER BY id", section)]

        # (the autosave tick may store part of the typing first: beside two busy processes
        # the Save's answer said "revision 2")
        wait_text(second, "save-status", "saved as revision")
        wait_until(lambda: stored("findings")[-1:] == [saved], "the findings to be saved")
        second.wait_for_function(STORED_JS + " === 0")
        # a Log out refused as a flood's would be ("Slow down") signs out all the same, after
        # the page's own "Leave site?" (its save did not run): the typing stays in this
        # browser for the next sign-in (the page stayed signed in, saying nothing of it)
        gate, dialogs = ApiGate(first), []
        # (the heartbeat's autosave refused too: what is typed reaches the server only by the
        # Log out, whose save must not run; a loaded run's tick stored part of it on the way)
        refused = (first.evaluate(LOGOUT_EVENT_JS), first.evaluate(
            "gradio_config.dependencies.find((d) => d.targets.some((t) => t[1] === 'tick')).id"))
        message = SLOW_DOWN.format(what="reader", n=24)

        def refuse(route) -> bool:
            body = route.request.post_data_json if route.request.method == "POST" else None
            if isinstance(body, dict) and body.get("fn_index") in refused:
                route.fulfill(status=429, content_type="application/json",
                              body=json.dumps({"detail": message, "error": message}))
                return True
            return False

        gate.rule = refuse
        first.on("dialog", lambda dialog: (dialogs.append(dialog.type), dialog.accept()))
        type_into(first, "impression", "Typed in the tab that logs out.")
        first.locator("#logout").click()
        first.get_by_label("username").wait_for()
        gate.remove()
        assert dialogs == ["beforeunload"]
        assert "Typed in the tab that logs out." in first.evaluate(
            "JSON.stringify(Object.values(localStorage))")
        # every write to this browser's storage, as another page of it sees them
        first.evaluate("""() => { window.written = [];
          addEventListener('storage', (e) => { if (e.newValue) written.push(e.newValue); }); }""")
        second.keyboard.press("Control+s")  # nothing unsaved: the request is refused all the same
        wait_text(second, "restore-note", "You are signed out")
        # (storage events arrive in order: once this mark has, every earlier write has too)
        second.evaluate("() => localStorage.setItem('test-mark', String(Date.now()))")
        first.wait_for_function("written.some((w) => /^\\d+$/.test(w))")
        assert not [w for w in first.evaluate("written") if "Saved before" in w]
        assert second.evaluate(STORED_JS) == 0
        type_into(second, "findings", "Typed after the other tab logged out.")
        second.keyboard.press("Control+s")
        wait_text(second, "restore-note", "You are signed out")
        # and no red "Error" of Gradio's covers the status line (it did, saying nothing more,
        # once Gradio had handled the refusal: a new-user trial)
        second.locator("#save-status .wrap .error").wait_for(state="attached")
        assert not second.locator(".wrap .error").filter(visible=True).count()
        findings = stored("findings")
        assert findings[-1] == saved and all(saved.startswith(t) for t in findings), findings
        assert not stored("impression")  # (the Log out saved nothing)
        # the words wait in this browser: signing in again offers them back
        second.reload()
        second.get_by_label("username").fill("alice")
        second.get_by_label("password").fill("correct horse battery")
        second.get_by_role("button", name="Login").click()
        wait_value(second, "findings", "v === 'Typed after the other tab logged out.'")
        context.close()
    finally:
        running.stop()
