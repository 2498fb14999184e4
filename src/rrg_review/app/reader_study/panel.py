"""The reader-study part of the page: a reader's study worklists (in the worklist column) and
the Sign reading step with its confirmation (in the editor column).

A reader enrolled in a study sees, per study, its name, the open session, signed/left, or the
time left to the washout when the next session is not open yet, and the open session's
readings in their allocated order: the case's key and whether it is signed. No arm is listed:
the arm code of a reading is shown only once it is open, beside its draft. Opening a row opens
the *reading* (review/desk.py `open_reading`), never the plain review of the case.

Signing is two requests: Sign reading stores what is typed, then shows the report as it will
be signed (`ReadingDesk.sign_preview`); Confirm signs exactly that (`sign`, refused when
another tab saved since); the reading is then read-only.
"""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import gradio as gr

from rrg_review.app.deps import PRIVATE, Guard, Inputs, Outputs, Reader, Tab, sync_json
from rrg_review.app.reader_study.service import (
    BlindedCases,
    ReaderStudyError,
    ReaderStudyService,
    StudyWorklist,
    WorklistReading,
)
from rrg_review.app.review.desk import Client, Desk, Saved
from rrg_review.app.review.panel import Editor
from rrg_review.reader_study.sessions import describe_wait

log = logging.getLogger(__name__)


class ReadingOutputs(Protocol):
    """The page's `reading_outputs`: the study worklists, Sign and the boxes' state after a
    sign; `lists`: the study worklists when the caller read them already."""

    def __call__(self, r: Reader, texts: dict[str, str] | None = None,
                 lists: StudyListView | None = None) -> Outputs: ...

# the reading's number (its `?reading=N`): "#", as "reading" was cut to "r..." at 1366 px
COLUMNS = ["#", "case", "status"]


@dataclass(frozen=True)
class StudyListView:
    """What the study worklists show for one reader (plain values: testable without Gradio).

    head: one Markdown line per study ('' when the reader is in none); rows: the open
    sessions' readings; first_open: the first unsigned reading there (None: none);
    blinded: the cases of the reader's unfinished blinded studies, which plain review refuses
    and the plain worklist leaves off (the rest of the worklist reads as before)."""

    head: str
    rows: list[list[Any]]
    first_open: int | None
    blinded: BlindedCases = field(default_factory=BlindedCases)

    def refuse_plain(self, case: int) -> None:
        """Raises ReaderStudyError when `case` belongs to a blinded study the reader has not
        finished (before anything of it is read or shown)."""
        self.blinded.refuse(case)

    @property
    def enrolled(self) -> bool:
        return bool(self.head)


def study_line(worklist: StudyWorklist, now: datetime, left_off: int = 0) -> str:
    """One study's line: session, signed/left, or what the reader waits for; and how many of
    its cases the plain worklist leaves off meanwhile (`left_off`)."""
    line = _progress_line(worklist, now)
    if not left_off:
        return line
    cases = "its case is" if left_off == 1 else f"its {left_off:,} cases are"
    return (f"{line}<br>*Blinded: {cases} left off your worklist below until you have "
            "signed all your readings of it.*")


def _progress_line(worklist: StudyWorklist, now: datetime) -> str:
    name, plan = html.escape(worklist.study), worklist.schedule
    if plan.open_session is not None:
        done = sum(r.signed_at is not None for r in worklist.readings)
        left = len(worklist.readings) - done
        return (f"**Reader study `{name}`** · session {plan.open_session} · {done} / "
                f"{len(worklist.readings)} signed, {left} left")
    if plan.next_session is not None and plan.opens_at is not None:
        return (f"**Reader study `{name}`** · session {plan.next_session} opens "
                f"{plan.opens_at:%Y-%m-%d %H:%M} UTC, after the washout "
                f"({describe_wait(plan.wait(now))} left)")
    return f"**Reader study `{name}`** · every session is signed: thank you."


class StudyLists:
    """A reader's study worklists as the page shows them (the server's clock decides which
    session is open)."""

    def __init__(self, studies: ReaderStudyService) -> None:
        self.studies = studies

    def view(self, login: str, reader: int) -> StudyListView:
        """The study worklists of the reader (`login`, account id `reader`)."""
        now = self.studies.clock()
        lines: list[str] = []
        readings: list[WorklistReading] = []
        names = self.studies.studies_of(login)
        blinded = self.studies.blinded_cases(reader) if names else BlindedCases()
        for name in names:
            worklist = self.studies.worklist(name, login, now)
            lines.append(study_line(worklist, now, blinded.count(name)))
            readings.extend(worklist.readings)
        keys = self.studies.case_keys({r.study_id for r in readings})
        rows = [[r.reading_id, keys.get(r.study_id, "?"),
                 "signed" if r.signed_at else "opened" if r.opened_at else "to read"]
                for r in readings]
        first = next((r.reading_id for r in readings if r.signed_at is None), None)
        return StudyListView("<br>".join(lines), rows, first, blinded)


@dataclass(frozen=True)
class StudyListPanel:
    """The study worklists, above the reader's general worklist."""

    head: gr.Markdown
    table: gr.Dataframe

    @classmethod
    def build(cls) -> StudyListPanel:
        return cls(gr.Markdown("", elem_id="study-head"),
                   gr.Dataframe(headers=COLUMNS, value=[], interactive=False, visible=False,
                                elem_id="study-worklist", max_height=260,
                                column_widths=["22%", "48%", "30%"]))

    def shown(self, view: StudyListView) -> dict[Any, Any]:
        return {self.head: view.head,
                self.table: gr.update(value=view.rows, visible=view.enrolled)}


@dataclass(frozen=True)
class SignPanel:
    """Sign reading, then Confirm / Cancel and the report as it will be signed (rows shown
    only while their buttons are enabled: page.css `rrg-offer`; Sign reading stays, greyed,
    while Confirm is offered)."""

    sign: gr.Button
    preview: gr.Markdown
    confirm: gr.Button
    cancel: gr.Button

    @classmethod
    def build(cls) -> SignPanel:
        with gr.Row(elem_id="sign-row", elem_classes="rrg-offer"):
            sign = gr.Button("Sign reading", elem_id="sign-reading", size="sm",
                             variant="primary", interactive=False)
        # the question's buttons above the report it shows, not under it: the report is drawn
        # a moment after the buttons come, and pushed them down under the reader's pointer
        with gr.Row(elem_id="sign-confirm-row", elem_classes="rrg-offer"):
            confirm = gr.Button("Confirm: sign this report", elem_id="sign-confirm", size="sm",
                                variant="stop", interactive=False)
            cancel = gr.Button("Cancel", elem_id="sign-cancel", size="sm", interactive=False)
        preview = gr.Markdown("", elem_id="sign-preview")
        return cls(sign, preview, confirm, cancel)

    def state(self, *, can_sign: bool, confirming: bool = False,
              preview: str = "") -> dict[Any, Any]:
        return {self.sign: gr.update(interactive=can_sign and not confirming),
                self.confirm: gr.update(interactive=confirming),
                self.cancel: gr.update(interactive=confirming), self.preview: preview}


def preview_markdown(report: dict[str, str]) -> str:
    """The report as it will be signed, escaped (report text is never markup)."""
    parts = [f"**{html.escape(section.capitalize())}**: "
             f"{html.escape(text) if text.strip() else '(empty)'}"
             for section, text in report.items()]
    return ("**Sign this report?** It cannot be changed afterwards.<br>"
            + "<br>".join(parts))


def wire_sign(sign: SignPanel, desk: Desk, guard: Guard, editor: Editor,
              reading_outputs: ReadingOutputs, reading_outs: list[Any],
              edit_in: set[Any], with_client: dict[str, Any]) -> None:
    """Sign reading (what is typed is saved first, then the report to sign is shown), Confirm
    (signs exactly that; refused if the boxes changed since) and Cancel."""
    p, tab = editor.panel, guard.tab

    @guard
    def on_sign(r: Reader, d: Inputs) -> Outputs:
        session, texts = r.session, p.texts_of(d)
        if session.reading is None:
            return {p.save_status: "Open a reading of your study worklist first."}
        client = Client.parse(d[tab.client])
        desk.count_time(session, client, time.monotonic())
        session.question = ""  # (a refusal kept on the status line is answered by this press)
        saved = desk.save(session, texts, client)
        out = editor.after_save(r, saved, texts, client)
        if not saved.ok or saved.closed:  # (closed: signed elsewhere; the page draws it again)
            return out
        # a score picked (or a comment, counts) and never sent with Submit rating: signing
        # made the reading read-only and the rating could never be given (a new-user trial
        # pressed 3, was refused by Alt+R for a reason, then signed): asked once, as a move is
        why = desk.unsent(session, d.get(p.comment), d.get(p.likert), page_study=client.study,
                          again="Sign reading again signs without")
        if why:
            session.question = f"⚠ **Not signed yet: {why}**"
            return {**out, p.save_status: session.question}
        try:
            preview = desk.sign_preview(session)
        except ReaderStudyError as exc:
            note = f"⚠ Not signed: {html.escape(str(exc))}"
            if session.signed:  # signed meanwhile in another tab or window
                return _signed_elsewhere(editor, r, texts, client, note)
            return {**out, **reading_outputs(r), p.save_status: note}
        return {**out, **sign.state(can_sign=True, confirming=True,
                                    preview=preview_markdown(preview.report))}

    on_confirm = guard(_on_confirm(sign, desk, editor, tab, reading_outputs))

    outs = list(dict.fromkeys([tab.state, p.save_status, tab.sync, p.keep_mine, p.take_theirs,
                               p.diff, *reading_outs]))
    # (progress on the status line, not on every output: see review.panel.Wiring.on_status)
    on_status = {"show_progress_on": [p.save_status], **with_client}
    sign.sign.click(on_sign, edit_in, outs, **PRIVATE, **on_status)
    sign.confirm.click(on_confirm, edit_in, outs, **PRIVATE, **on_status)
    sign.cancel.click(guard(_on_cancel(sign, p.save_status)), {tab.state}, outs, **PRIVATE,
                      show_progress_on=[p.save_status])


def _on_confirm(sign: SignPanel, desk: Desk, editor: Editor, tab: Tab,
                reading_outputs: ReadingOutputs
                ) -> Callable[[Reader, Inputs], Outputs]:
    """Confirm: signs exactly the report shown at Sign reading; refused, and said until Sign
    reading is pressed again, if the boxes changed since."""
    p = editor.panel

    def on_confirm(r: Reader, d: Inputs) -> Outputs:
        session, texts, client = r.session, p.texts_of(d), Client.parse(d[tab.client])
        desk.count_time(session, client, time.monotonic())
        if desk.pending(session, texts, client):
            session.sign_token = None
            # kept on the status line under the autosave's note that follows (it replaced the
            # refusal within seconds, and the reader who clicked Confirm saw nothing refused:
            # a new-user trial, 2 of 3), until Sign reading is pressed again
            session.question = ("⚠ Not signed: you changed the report after Sign reading; "
                                "press Sign reading again.")
            return {**sign.state(can_sign=True), tab.state: session,
                    p.save_status: session.question}
        session.question = ""
        try:
            signed = desk.sign(session)
        except ReaderStudyError as exc:
            note = f"⚠ Not signed: {html.escape(str(exc))}"
            if session.signed:  # signed meanwhile in another tab or window
                return {**_signed_elsewhere(editor, r, texts, client, note), sign.preview: ""}
            session.question = note
            return {**reading_outputs(r), sign.preview: "", tab.state: session,
                    p.save_status: session.question}
        # "open the next one in your study worklist" after the session's last reading, with
        # that list empty through the washout, misled a new-user trial
        lists = (StudyLists(desk.readings.studies).view(r.name, r.id)
                 if desk.readings is not None else None)
        then = ("Open the next one in your study worklist (Alt+N)."
                if lists is not None and lists.first_open is not None else
                "No other reading of yours is open now (the study worklist says when a next "
                "session opens).")
        return {**reading_outputs(r, lists=lists), tab.state: session,
                tab.sync: sync_json(r.name, session),
                p.save_status: f"Signed ({signed.signed_at:%Y-%m-%d %H:%M} UTC): this reading "
                               f"is read-only now. {then}"}
    return on_confirm


def _signed_elsewhere(editor: Editor, r: Reader, texts: dict[str, str], client: Client,
                      note: str) -> Outputs:
    """Sign or Confirm refused as the reading was signed meanwhile in another tab or window: it
    is read-only here from now on, and the page draws it again as signed (its sync says so:
    static/page.js `signedElsewhere`); the boxes stay as they are until then."""
    return editor.after_save(r, Saved(note, {}, False, closed=True), texts, client)


def _on_cancel(sign: SignPanel, status: gr.Markdown) -> Callable[[Reader, Inputs], Outputs]:
    def on_cancel(r: Reader, d: Inputs) -> Outputs:
        """Not signed: the confirmation asked for is dropped."""
        r.session.sign_token = None
        r.session.question = ""
        return {**sign.state(can_sign=r.session.reading is not None and not r.session.signed),
                status: "Not signed."}
    return on_cancel
