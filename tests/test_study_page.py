"""A blinded 2-reader x 6-case, 2-arm crossover read end to end on the page (issue #20), in
real Chromium against the real app (one app and one browser for the module): the study is
created by the real CLI from a design file, the readers sign in, read and sign their session-1
readings in their allocated order, the washout is crossed by moving the study clock of the
running server (a file it reads: never a sleep), session 2 shows each case under the other arm,
and `study analyze NAME` finds 2 x 6 x 2 signed readings with both arms. Every page's DOM and
every Gradio request and answer body are checked for what blinding hides: the model's preset
and id, the arm names, the cases' reference reports and the other reader's words. Hostile
cases: another reader's reading by its id, a session before its washout, a second tab of the
same reader that saves and signs after the first signed."""

from __future__ import annotations

import contextlib
import json
import os
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select

from tests.browser import App, close_pages, top_in_column, wait_text, wait_value
from tests.conftest import TEST_PASSWORD_COST

pytest_plugins = ["tests.browser"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

T0 = datetime(2026, 11, 2, 8, tzinfo=UTC)
MODEL_ID = "secret-org/rrg-model-7b"
PRESET = "rrg24-baseline"
TEMPLATE = "Template: heart size normal, lungs clear."
STUDY = "page-crossover"
PASSWORD = "correct horse battery"
# what a reader's page must never show or carry (besides references and other readers' words)
SECRETS = (MODEL_ID, "secret-org", PRESET, "rrg24", "draft:", "unassisted", "neighbour",
           "retrieval", "Model preset",
           # the review aids' reference-based flags (#22: never for a blinded reader)
           "not in the reference", "in the reference, ")


def _build(path, tmp_path, templates):
    """The demo database with two readers, a model's drafts of six cases and the study,
    created by the real CLI; returns (case keys, reference texts)."""
    from rrg_review.app.accounts.service import AccountService
    from rrg_review.app.cli import main
    from rrg_review.app.settings import Settings
    from rrg_review.db.models import Draft, ReferenceReport, Study

    settings = Settings.from_args(str(path))
    templates.copy_sqlite("demo", settings)
    db = settings.open_database()
    try:
        accounts = AccountService(db, password_cost=TEST_PASSWORD_COST)
        for name in ("ann", "bob"):
            accounts.add(name, PASSWORD)
        with db.write() as s:
            _more_cases(s, 2)
            cases = list(s.scalars(select(Study).where(Study.image_count > 0)
                                   .order_by(Study.sort_key).limit(6)))
            keys = [c.study_key for c in cases]
            for c in cases:
                for section in ("findings", "impression"):
                    s.add(Draft(study_id=c.id, section=section, preset=PRESET,
                                text=f"Model {section} of {c.study_key}.", model_id=MODEL_ID,
                                generation={"neighbour_study_id": 1}))
            references = [t for r in s.scalars(select(ReferenceReport).where(
                ReferenceReport.study_id.in_([c.id for c in cases])))
                for t in (r.findings, r.impression) if t and len(t) > 12]
    finally:
        db.dispose()
    assert len(keys) == 6, keys
    design = tmp_path / "design.json"
    design.write_text(json.dumps({
        "name": STUDY, "cases": keys, "readers": ["ann", "bob"],
        "arms": [{"arm": "unassisted", "template": TEMPLATE}, f"draft:{PRESET}"],
        "design": "crossover", "sessions": 2, "washout_days": 14, "seed": 7,
        "blinded": True}))
    assert main(["study", "create", str(design), "--db", str(path)]) == 0
    return keys, references


def _more_cases(s, n):
    """The demo has four studies with images: n more, each with the first one's films (a new
    patient each, so none is another's prior) and a reference report of its own."""
    from rrg_review.db.models import Image, Patient, ReferenceReport, Study

    first = s.scalars(select(Study).where(Study.image_count > 0).order_by(Study.sort_key)).first()
    columns = [c.key for c in Image.__table__.columns if c.key not in ("id", "study_id")]
    for i in range(n):
        patient = Patient(source=first.source, key=f"extra-patient-{i}")
        s.add(patient)
        s.flush()
        study = Study(patient_id=patient.id, source=first.source, study_key=f"EXTRA-{i + 1}",
                      split=first.split, image_count=first.image_count,
                      sort_key=f"zz-extra-{i}")
        s.add(study)
        s.flush()
        for image in first.images:
            s.add(Image(study_id=study.id, **{c: getattr(image, c) for c in columns}))
        s.add(ReferenceReport(study_id=study.id, findings=f"Reference findings of extra {i}.",
                              impression=f"Reference impression of extra {i}."))
    s.flush()


@pytest.fixture(scope="module")
def study_app(tmp_path_factory, database_templates):
    folder = tmp_path_factory.mktemp("study-page")
    path = folder / "app.sqlite"
    keys, references = _build(path, folder, database_templates)
    clock = folder / "clock.txt"
    clock.write_text(T0.isoformat())
    with pytest.MonkeyPatch.context() as env:
        env.setenv("RRG_REVIEW_STUDY_CLOCK", str(clock))
        app = App(path, "--login", "--no-predraft")
    yield app, clock, keys, references
    app.stop()


class Reader:
    """One reader's browser context, its page and every Gradio body it sent or received."""

    def __init__(self, browser, app, name):
        self.name, self.app = name, app
        self.context = browser.new_context(viewport={"width": 1500, "height": 1000})
        self.bodies: list[str] = []
        self.context.on("requestfinished", self._keep)
        self.page = self.login(self.context.new_page())

    def _keep(self, request):
        if request.post_data:
            self.bodies.append(request.post_data)
        from playwright.sync_api import Error as PlaywrightError

        # (a body Chromium did not keep, an image's, say: nothing to read)
        with contextlib.suppress(PlaywrightError):
            response = request.response()
            if response is not None:
                self.bodies.append(response.body().decode("utf-8", "replace"))

    def login(self, page, query=""):
        page.goto(self.app.url + query)
        page.get_by_label("username").fill(self.name)
        page.get_by_label("password").fill(PASSWORD)
        page.get_by_role("button", name="Login").click()
        page.locator("#reader").get_by_text(self.name).wait_for()
        return page

    def tab(self, query=""):
        """Another tab of this signed-in reader."""
        page = self.context.new_page()
        page.goto(self.app.url + query)
        page.locator("#reader").get_by_text(self.name).wait_for()
        return page

    def readings(self, session):
        return self.app.query(
            "SELECT r.id, s.study_key, a.spec FROM reading r JOIN study s ON s.id = r.study_id "
            "JOIN reader_study_arm a ON a.id = r.arm_id JOIN reader ON reader.id = r.reader_id "
            "WHERE reader.name = ? AND r.session = ? ORDER BY r.position", self.name, session)

    def seen(self):
        return "\n".join([*self.bodies, *(p.content() for p in self.context.pages)])


def _read(reader, reading_id, key, arm, words, score_first=False, by_key=False):
    """Open a reading from the study worklist (`by_key`: with Alt+N from the reading signed
    before it), check its draft is its arm's, type, sign (`score_first`: pick a score first
    and never submit it)."""
    page = reader.page
    if by_key:
        page.keyboard.press("Alt+KeyN")
    else:
        page.locator("#study-worklist").get_by_text(key, exact=True).filter(visible=True
                                                                           ).first.click()
    page.locator("#film-head").get_by_text(key).wait_for()
    wait_text(page, "edit-findings", "Findings (editable)")
    assert page.locator("#save").is_enabled() and page.locator("#rate").is_enabled()
    if by_key:  # the reading left is signed: said so, not that edits were saved into it
        wait_text(page, "save-status", "is signed.")  # ("your edits ... are saved": a trial)
        assert "Your edits" not in page.locator("#save-status").inner_text()
    findings = page.locator("#edit-findings textarea")
    expected = TEMPLATE if arm == "unassisted" else f"Model findings of {key}."
    try:
        page.wait_for_function("([el, v]) => el.value === v", arg=[findings.element_handle(),
                                                                   expected], timeout=20_000)
    except Exception:
        raise AssertionError(f"{key} {arm}: {findings.input_value()!r} "
                             f"{page.locator('#save-status').inner_text()!r}") from None
    impression = page.locator("#edit-impression textarea").input_value()
    assert impression == ("" if arm == "unassisted" else f"Model impression of {key}.")
    # blinded to the reference, drafting nothing: no empty reference panel and no greyed
    # Regenerate (a new-user trial)
    assert page.locator("#reference").is_hidden() and page.locator("#draft-button").is_hidden()
    findings.click()
    page.keyboard.press("End")
    page.keyboard.type(f" {words}")
    if score_first:  # a score picked and never submitted: Sign asks once (a new-user trial
        page.keyboard.press("Escape")  # signed, and the rating could never be given)
        page.keyboard.press("3")
        page.locator("#sign-reading").click()
        wait_text(page, "save-status", "Not signed yet: your score is not sent")
        wait_text(page, "save-status", "Sign reading again signs without it")
        assert rows_signed(reader, reading_id) == [(None,)]
    if score_first:  # typed after Sign reading, then Confirm: refused, and the refusal stays
        page.locator("#sign-reading").click()  # under the typing's autosave note (it replaced
        page.wait_for_function(  # the refusal within seconds: a new-user trial, 2 of 3)
            "() => !document.querySelector('#sign-confirm').disabled")
        findings.click()
        page.keyboard.press("End")
        page.keyboard.type(" Seen.")
        words += " Seen."
        page.locator("#sign-confirm").click()
        # ("you changed the report", or, where a tick stored the words first, "changed since
        # you were asked")
        wait_text(page, "save-status", "Not signed")
        findings.click()  # typing on: its autosave's note comes above the refusal, which stays
        page.keyboard.press("End")
        page.keyboard.type(" More.")
        words += " More."
        page.wait_for_function("() => { const t = document.getElementById('save-status')"
                               ".innerText; return t.includes('(autosave)')"
                               " && t.includes('Not signed'); }")
        assert rows_signed(reader, reading_id) == [(None,)]
    page.locator("#sign-reading").click()
    # Confirm comes where it stays: the report drawn after it does not move it, and Sign
    # reading stays, greyed, above it (a second click on Sign once landed on Confirm)
    page.wait_for_function("() => !document.querySelector('#sign-confirm').disabled")
    confirm_at = top_in_column(page, "#sign-confirm")
    assert page.locator("#sign-reading").is_visible()
    assert page.locator("#sign-reading").is_disabled()
    wait_text(page, "sign-preview", words)
    assert top_in_column(page, "#sign-confirm") == confirm_at
    page.locator("#sign-confirm").click()
    wait_text(page, "save-status", "Signed")
    wait_text(page, "save-status", "read-only now.")
    assert findings.is_disabled()
    # and says so (it read "Findings (editable)"), until the next reading opens
    wait_text(page, "edit-findings", "Findings (signed: read-only)")
    # and what writes to it is greyed (Save and Submit rating looked clickable: a trial)
    for button in ("#save", "#revert", "#accept", "#rate"):
        assert page.locator(button).is_disabled(), button
    assert rows_signed(reader, reading_id)[0][0] is not None


def rows_signed(reader, reading_id):
    return reader.app.query("SELECT signed_at FROM reading WHERE id = ?", reading_id)


def _session(reader, session, keys):
    readings = reader.readings(session)
    assert sorted(k for _, k, _ in readings) == sorted(keys)
    page = reader.page
    wait_text(page, "study-head", f"session {session} · 0 / 6 signed")
    shown = page.locator("#study-worklist").inner_text()
    assert sorted(keys, key=shown.index) == [k for _, k, _ in readings]  # the allocated order
    for i, (reading_id, key, arm) in enumerate(readings):
        began = time.monotonic()
        # (session 2: Alt+N from each signed reading opens the next, as a click on its row)
        _read(reader, reading_id, key, arm.split(":")[0], f"{reader.name.upper()}{session}{i}",
              score_first=session == 1 and i == 0, by_key=session == 2 and i > 0)
        print(f"{reader.name} session {session} reading {i + 1}: "
              f"{time.monotonic() - began:.1f} s")
    # the last one's Signed line sends the reader to no empty list (it did: a new-user trial)
    wait_text(page, "save-status", "No other reading of yours is open now")
    if session == 2:  # every reading signed: Alt+N says so and opens nothing
        page.keyboard.press("Alt+KeyN")
        wait_text(page, "save-status", "No other reading to read in this session")
        page.locator("#film-head").get_by_text(readings[-1][1]).wait_for()
    return {key: arm for _, key, arm in readings}


def _hidden(page):
    """The tab as one behind the reader's other windows (`document.hidden`): its heartbeat
    asks nothing of the server (another tab's saves, a signing), only its typing is saved."""
    page.evaluate("() => Object.defineProperty(document, 'hidden', {get: () => true})")
    return page


def _looking_tab_after_signing(page):
    """A tab of the reading, left open and never touched while the reading was signed in
    another: it turns read-only by itself, from its heartbeat (it looked editable until the
    reader's next save was refused: a new-user trial), with nothing to quote."""
    page.bring_to_front()
    page.wait_for_function("() => document.querySelector('#edit-findings textarea')?.disabled"
                           " && document.querySelector('#edit-impression textarea')?.disabled")
    wait_text(page, "save-status", "Reading signed (")
    # (the note is drawn by the page's poll after the answer that drew the tab again: read
    # at once, beside two busy processes it was not there yet)
    wait_text(page, "restore-note", "signed in another tab or window")
    note = page.locator("#restore-note").inner_text()
    assert "signed in another tab or window; it is read-only now" in note, note
    assert "typed here" not in note, note
    for button in ("#sign-reading", "#save"):
        assert page.locator(button).is_disabled(), button
    # its study worklist follows the other tab's signings once the reader is back at it (the
    # heartbeat's refresh; it said "opened" and "to read" of readings signed meanwhile)
    page.mouse.move(700, 400)
    wait_text(page, "study-head", "every session is signed")
    # every session signed: the cases are back on the plain worklist, and nothing says
    # otherwise
    wait_text(page, "worklist", "EXTRA-2")
    # with the line under them: the page script refits the table when that line changes
    # (the heartbeat's refresh left it out, and a table of two rows that became six kept
    # drawing two, under "1-2 of 2")
    wait_text(page, "worklist-page-label", "1-6 of 6")
    for line in ("progress", "study-head"):
        text = page.locator(f"#{line}").inner_text()
        assert "blinded" not in text and "left off" not in text, text
    page.close()


def _second_tab_after_signing(reader, page, reading):
    """The other tab (hidden, `_hidden`) types and signs after the reading was signed in the
    first: refused, nothing stored, and the tab is drawn again as signed, read-only, with the
    words it typed quoted (it stayed editable, every save refused: a new-user trial)."""
    page.bring_to_front()
    page.locator("#edit-findings textarea").click()
    page.keyboard.type(" late")
    typed = page.locator("#edit-findings textarea").input_value()
    # (force: its autosave, refused, may have had the tab drawn again, Sign greyed, already)
    page.locator("#sign-reading").click(force=True)
    page.wait_for_function("() => /elsewhere|is signed|read-only/.test("
                           "document.getElementById('save-status').innerText)")
    if "elsewhere" in page.locator("#save-status").inner_text():  # told of tab one's save,
        page.locator("#keep-mine").click()  # the typing is held: Keep mine stores it, refused
    page.wait_for_function("() => document.querySelector('#edit-findings textarea')?.disabled"
                           " && document.querySelector('#edit-impression textarea')?.disabled")
    # the line of whichever was handled last: the drawing again as signed, or Sign's refusal
    # (the page keeps the newest line: a loaded run handled the forced Sign click after the
    # drawing again)
    page.wait_for_function("() => /Reading signed \\(|is signed; it is read-only now/.test("
                           "document.getElementById('save-status').innerText)")
    signed = reader.app.query("SELECT text FROM revision WHERE reading_id = ? AND section = "
                              "'findings' ORDER BY number DESC LIMIT 1", reading)[0][0]
    wait_value(page, "findings", "v === " + json.dumps(signed))
    assert "(signed: read-only)" in page.locator("#edit-findings").inner_text()
    for button in ("#sign-reading", "#save"):
        assert page.locator(button).is_disabled(), button
    # (the note is drawn by the page's poll after the answer that drew the tab again: read
    # at once, beside two busy processes it was not there yet)
    wait_text(page, "restore-note", "signed in another tab or window")
    note = page.locator("#restore-note").inner_text()
    assert "signed in another tab or window; it is read-only now" in note, note
    assert typed.endswith(" late") and f"findings: “{typed.strip()}”" in note, note
    # the note lies over the boxes' labels, none of them drawn through its words ("Findings
    # (signed: read-only)" was, Gradio's labels sitting higher: a screenshot at 1366 px)
    covered = page.evaluate("""() => {
      const r = document.querySelector('#restore-note .rrg-restore').getBoundingClientRect();
      const out = [];
      for (let y = r.top + 2; y < r.bottom - 1; y += 4) {
        for (let x = r.left + 2; x < r.right - 1; x += 12) {
          const top = document.elementFromPoint(x, y);
          if (!top.closest('#restore-note')) out.push([x, y, top.outerHTML.slice(0, 80)]);
        }
      }
      return out;
    }""")
    assert not covered, covered[:3]
    assert not reader.app.query("SELECT id FROM revision WHERE reading_id = ? AND text LIKE ?",
                                reading, "% late")
    # nothing of them is kept in this browser to be offered back later
    assert not page.evaluate("() => Object.keys(localStorage).some((k) => k.startsWith('rrg:')"
                             " && localStorage.getItem(k).includes(' late'))")
    page.close()


def _no_leaks(reader, other, references):
    seen = reader.seen()
    for secret in (*SECRETS, *references, *(f"{other.upper()}{s}{i}" for s in (1, 2)
                                            for i in range(6))):
        assert secret not in seen, f"{reader.name}'s page shows or carries {secret!r}"


def test_blinded_crossover_read_and_signed_in_the_browser(study_app, browser, tmp_path):
    from rrg_review.app.cli import main

    app, clock, keys, references = study_app
    try:
        ann, bob = Reader(browser, app, "ann"), Reader(browser, app, "bob")
        arms1 = {r.name: _session(r, 1, keys) for r in (ann, bob)}
        # the model's drafts reached the pages (the network log is not empty of them)
        for reader in (ann, bob):
            assert any("Model findings of" in body for body in reader.bodies)
        # session 2 waits for the washout: the list says so, the server refuses its readings
        wait_text(ann.page, "study-head", "session 2 opens 2026-11-16")
        # still blinded: its cases (here the whole worklist) are left off the plain worklist
        wait_text(ann.page, "study-head", "its 6 cases are left off your worklist")
        later = ann.readings(2)[0][0]
        tab = ann.tab(f"?reading={later}")
        wait_text(tab, "save-status", "after the washout")
        tab.close()
        # another reader's reading by its id: refused, nothing of it shown
        theirs = ann.readings(1)[0]
        tab = bob.tab(f"?reading={theirs[0]}")
        wait_text(tab, "save-status", "is not one of the readings of 'bob'")
        assert "ANN1" not in tab.content()
        tab.close()
        # the study clock of the running server moves past the washout
        clock.write_text((T0 + timedelta(days=15)).isoformat())
        for reader in (ann, bob):
            reader.page.reload()
            reader.page.locator("#reader").get_by_text(reader.name).wait_for()
        # two more tabs of ann on the reading she is about to sign in her first tab: one
        # hidden, where she types after the signing, one she only looks at
        reading, key, _ = ann.readings(2)[0]
        second, looking = ann.tab(f"?reading={reading}"), ann.tab(f"?reading={reading}")
        for tab in (second, looking):
            tab.locator("#film-head").get_by_text(key).wait_for()
            # a tab opened by the reading's address leaves the cases off its plain worklist
            # as the others do (a screenshot showed them there, "drafted", under a study line
            # saying they were left off)
            wait_text(tab, "progress", "6 in your blinded reader study")
            assert not any(k in tab.locator("#worklist").inner_text() for k in keys)
        _hidden(second)
        ann.page.bring_to_front()  # (a page in the background gets no animation frames)
        arms2 = {r.name: _session(r, 2, keys) for r in (ann, bob)}
        _looking_tab_after_signing(looking)
        _second_tab_after_signing(ann, second, reading)
        for name in ("ann", "bob"):
            assert all(arms2[name][k] != arms1[name][k] for k in keys)  # the other arm
        for reader, other in ((ann, "bob"), (bob, "ann")):
            _no_leaks(reader, other, references)
            wait_text(reader.page, "study-head", "every session is signed")
            assert "left off" not in reader.page.locator("#study-head").inner_text()
    finally:
        close_pages(browser)
    typed = app.query("SELECT COUNT(*) FROM reading_section WHERE keystrokes > 0 AND edits > 0"
                      " AND first_keystroke_at IS NOT NULL AND section = 'findings'")
    assert typed == [(24,)]
    out = tmp_path / "result.json"
    assert main(["study", "analyze", STUDY, "--db", str(app.db), "--csv",
                 str(tmp_path / "readings.csv"), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    table = (tmp_path / "readings.csv").read_text().splitlines()
    assert len(table) == 1 + 24
    assert result["n"]["readings"] == 24 and result["n"]["excluded"] == 0, result["n"]
    arms = {line.split(",")[table[0].split(",").index("arm")] for line in table[1:]}
    assert arms == {"unassisted", f"draft:{PRESET}"}
    assert os.path.getsize(out) > 0
