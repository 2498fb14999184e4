"""Reader-study status on the page, for admins: what a study coordinator checks during a study
(issue #20, "In the browser"): per study and reader, readings signed / total per session, the
session open to the reader now or when the next one opens and how long the washout has left,
the reader's last signature, and the draft arms' cases still without a draft.

The same facts as `rrg-review study status NAME` (`ReaderStudyService.status`), judged by the
server's study clock (`ReaderStudyService.clock`: the real time, or the file named by
RRG_REVIEW_STUDY_CLOCK), never the browser's. Only arm codes appear: the status carries no arm
key, so a coordinator's screen unblinds nothing (`study show --unblind` is the audited way).

The panel is hidden unless the tab's account is an admin, and the server checks again on every
request: a reader's tab that sends the panel's event anyway is answered with one sentence and
no study in it. The status is built when the panel is opened and on Refresh, never on a timer
(the page polls enough already).
"""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import gradio as gr

from rrg_review.app.accounts.service import AccountService
from rrg_review.app.deps import PRIVATE, Guard, Inputs, Outputs, Reader
from rrg_review.app.reader_study.service import (
    ReaderStatus,
    ReaderStudyService,
    StudyStatus,
    StudySummary,
)

log = logging.getLogger(__name__)

REFUSAL = "Only an admin can see the status of reader studies."
NBSP = "\u00a0"  # a number stays on the line of its unit in the narrow column


@dataclass(frozen=True)
class ReaderRow:
    """One reader of one study as the table shows it.

    sessions: "signed / total" per session, from session 1 ("-" for a session with no
    readings of theirs); state: the session open now, or when the next opens and the washout
    left, or finished; last_signed: the reader's latest signature ("-": none yet)."""

    reader: str
    sessions: tuple[str, ...]
    state: str
    last_signed: str


@dataclass(frozen=True)
class StudyBoard:
    """One study: its name, a line on its design and progress, its readers' rows, and one
    warning per draft arm (by blinded code) with cases still without a draft and per reader who
    already worked on its cases outside it."""

    name: str
    summary: str
    sessions: int
    rows: tuple[ReaderRow, ...]
    warnings: tuple[str, ...]


def _when(value: datetime | None) -> str:
    return f"{value:%Y-%m-%d %H:%M} UTC" if value is not None else "-"


def reader_row(status: ReaderStatus) -> ReaderRow:
    """The row of one reader's status (`ReaderStudyService.status`)."""
    state = status.schedule.words(status.washout_left)
    signed = [p.last_signed_at for p in status.sessions if p.last_signed_at is not None]
    return ReaderRow(status.reader,
                     tuple(f"{p.signed} / {p.total}" if p.total else "-"
                           for p in status.sessions),
                     state, _when(max(signed)) if signed else "-")


def study_board(summary: StudySummary, status: StudyStatus) -> StudyBoard:
    """One study's board from its summary (`studies`) and its status (`status`)."""
    line = (f"{summary.design}, {summary.sessions}{NBSP}session"
            f"{'s' * (summary.sessions != 1)}, washout {summary.washout_days:g}{NBSP}d, "
            f"{'blinded' if summary.blinded else 'not blinded'} · {summary.readers}{NBSP}readers"
            f" x {summary.cases}{NBSP}cases · {summary.signed}{NBSP}/{NBSP}{summary.readings}"
            f"{NBSP}signed")
    missing = tuple(f"arm {code}: {n} case{'s' * (n != 1)} without a draft (draft them "
                    "first; `study show --unblind` names the arm's model)"
                    for code, n in status.missing_drafts.items()) + tuple(
        f"{reader} already worked on {n} of these cases outside the study (review "
        "worklist): not a first read" for reader, n in status.seen_outside.items())
    return StudyBoard(summary.name, line, summary.sessions,
                      tuple(reader_row(r) for r in status.readers), missing)


def status_boards(studies: ReaderStudyService,
                  now: datetime | None = None) -> tuple[datetime, tuple[StudyBoard, ...]]:
    """Every study's board at one moment (the service's clock unless `now` is given), by
    name; returns that moment with them."""
    now = now or studies.clock()
    return now, tuple(study_board(summary, studies.status(summary.name, now))
                      for summary in studies.studies())


def boards_html(now: datetime, boards: Sequence[StudyBoard]) -> str:
    """The boards as HTML (every name escaped): per study a heading, its summary line and a
    table; each reader takes two rows (their counts, then their state and last signature), so
    the table reads in the narrow worklist column too."""
    head = (f'<p class="rrg-sa-now">Status at {_when(now)} (server clock) · '
            f"{len(boards)} stud{'y' if len(boards) == 1 else 'ies'}</p>")
    if not boards:
        return head + "<p>No reader studies yet (rrg-review study create FILE).</p>"
    return head + "".join(_board_html(board) for board in boards)


def _board_html(board: StudyBoard) -> str:
    e = html.escape
    columns = len(board.rows[0].sessions) if board.rows else board.sessions
    header = "".join(f"<th>S{n}</th>" for n in range(1, columns + 1))
    rows = "".join(
        f'<tr class="rrg-sa-counts"><td>{e(row.reader)}</td>'
        + "".join(f"<td>{e(cell)}</td>" for cell in row.sessions) + "</tr>"
        f'<tr class="rrg-sa-state"><td colspan="{columns + 1}">{e(row.state)}'
        f"<br>last signed {e(row.last_signed)}</td></tr>" for row in board.rows)
    warnings = "".join(f'<p class="rrg-sa-warn">⚠ {e(w)}</p>' for w in board.warnings)
    return (f'<section class="rrg-sa-study" data-study="{e(board.name)}">'
            f"<h4>{e(board.name)}</h4><p>{e(board.summary)}</p>"
            f'<table><thead><tr><th>Reader</th>{header}</tr></thead>'
            f"<tbody>{rows}</tbody></table>{warnings}</section>")


@dataclass(frozen=True)
class StudyAdminPanel:
    """The collapsed "Reader studies" panel (hidden until the page knows its reader is an
    admin): Refresh (above: the list grows with the studies), and the status."""

    accordion: gr.Accordion
    body: gr.HTML
    refresh: gr.Button

    @classmethod
    def build(cls) -> StudyAdminPanel:
        with gr.Accordion("Reader studies (admin)", open=False, visible=False,
                          elem_id="study-admin") as accordion:
            refresh = gr.Button("Refresh", elem_id="study-admin-refresh", size="sm")
            body = gr.HTML("", elem_id="study-admin-status", padding=False)
        return cls(accordion, body, refresh)


class StudyAdmin:
    """The panel's handlers (plain methods taking the guard's `Reader`: testable without a
    browser). Every one checks that the account is an admin on the server."""

    def __init__(self, panel: StudyAdminPanel, studies: ReaderStudyService,
                 accounts: AccountService) -> None:
        self.panel, self.studies, self.accounts = panel, studies, accounts

    def is_admin(self, r: Reader) -> bool:
        account = self.accounts.by_id(r.id)
        return account is not None and account.is_admin

    def on_page_loaded(self, r: Reader, d: Inputs) -> Outputs:
        """Show the panel to an admin (it stays hidden, and empty, for a reader)."""
        return {self.panel.accordion: gr.update(visible=self.is_admin(r))}

    def on_study_status(self, r: Reader, d: Inputs) -> Outputs:
        """The status of every study now; a reader is refused in one sentence."""
        if not self.is_admin(r):
            log.warning("reader-study status refused to %s (not an admin)", r.name)
            return {self.panel.body: REFUSAL}
        now, boards = status_boards(self.studies)
        return {self.panel.body: boards_html(now, boards)}


def wire_study_admin(panel: StudyAdminPanel, studies: ReaderStudyService,
                     accounts: AccountService, guard: Guard, loaded: Any) -> StudyAdmin:
    """After the page load the panel is shown to admins; opening it and Refresh fetch the
    status (read-only handlers: not under the tab's lock)."""
    admin = StudyAdmin(panel, studies, accounts)
    state: set[Any] = {guard.tab.state}
    loaded.then(guard(admin.on_page_loaded, lock=False), state, [panel.accordion], **PRIVATE)
    on_study_status = guard(admin.on_study_status, lock=False)
    panel.accordion.expand(on_study_status, state, [panel.body], **PRIVATE)
    panel.refresh.click(on_study_status, state, [panel.body], **PRIVATE)
    return admin
