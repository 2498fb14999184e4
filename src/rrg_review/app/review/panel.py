"""The review panel (the editor column): the findings and impression boxes, Save / Revert /
Accept, conflicts with another tab's save (Keep mine / Take theirs), the draft beside the boxes
and the word diff, the rating (Likert, "acceptable", ReXVal error counts, comment) and the
dataset's reference report.

Handlers call the Gradio-free `Desk` and turn its results into component updates; report text is
plain text in Textboxes and html.escape'd wherever it becomes HTML."""

from __future__ import annotations

import asyncio
import html
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gradio as gr

from rrg_review.app.deps import (
    DRAFT_LANDED,
    LIGHT,
    PRIVATE,
    QUIET,
    Guard,
    Inputs,
    Outputs,
    Reader,
    Services,
    Tab,
    sync_json,
    wait_for_draft,
    with_number,
)
from rrg_review.app.review.desk import Client, Desk, Opened, Saved, Session, asking
from rrg_review.app.review.service import RatingView
from rrg_review.core.vocabulary import REXVAL_CATEGORIES, REXVAL_LABELS, SECTIONS
from rrg_review.metrics.edits import word_diff

if TYPE_CHECKING:
    from rrg_review.app.drafting.service import DraftingService

log = logging.getLogger(__name__)

# "1 False report of a finding": the number and wording of core.vocabulary, as a form label
FORM_LABELS = {c: f"{i} {REXVAL_LABELS[c].capitalize()}"
               for i, c in enumerate(REXVAL_CATEGORIES, start=1)}


def _diff(draft: str, text: str) -> list[tuple[str, str | None]]:
    ops = {"equal": None, "delete": "-", "insert": "+"}
    return [(p.text + " ", ops[p.op]) for p in word_diff(draft or "", text or "")]


def diff_of(drafts: dict[str, str], texts: dict[str, str]) -> list[tuple[str, str | None]]:
    return [*_diff(drafts["findings"], texts["findings"]), ("| ", None),
            *_diff(drafts["impression"], texts["impression"])]


@dataclass(frozen=True)
class ReviewPanel:
    save_status: gr.Markdown
    restore_note: gr.HTML
    keep_mine: gr.Button
    take_theirs: gr.Button
    draft_button: gr.Button
    unload_button: gr.Button
    model_line: gr.Markdown
    draft_error: gr.Markdown
    findings: gr.Textbox
    impression: gr.Textbox
    save_button: gr.Button
    revert_button: gr.Button
    accept_button: gr.Button
    accept_confirm: gr.Button
    accept_cancel: gr.Button
    revert_confirm: gr.Button
    revert_cancel: gr.Button
    likert: gr.Radio
    acceptable: gr.Checkbox
    rate_button: gr.Button
    rate_status: gr.Markdown
    rexval: dict[tuple[str, str], gr.Number]
    comment: gr.Textbox
    model_draft: gr.Accordion
    new_findings: gr.Textbox
    new_impression: gr.Textbox
    use_draft: gr.Button
    diff: gr.HighlightedText
    reference: gr.Accordion
    ref_findings: gr.Textbox
    ref_impression: gr.Textbox
    # issue #22: the flags and the suggestions over the ReXVal rows, the tick
    # that confirms them, and what the page script draws over the boxes (hidden)
    flags_note: gr.HTML
    aids: gr.Textbox
    suggest_note: gr.HTML
    checked: gr.Checkbox

    @classmethod
    def build(cls) -> ReviewPanel:
        """Built inside the editor column; the parts in reading order."""
        parts: dict[str, Any] = {"save_status": gr.Markdown(elem_id="save-status"),
                                 "restore_note": gr.HTML("", elem_id="restore-note")}
        parts.update(_conflict_and_draft_rows())
        parts.update(_boxes_and_buttons())
        parts.update(_rating())
        parts.update(_rexval())
        parts.update(_draft_diff_reference())
        return cls(**parts)

    @property
    def rating_fields(self) -> list[Any]:
        return [self.likert, self.acceptable, *self.rexval.values(), self.checked, self.comment]

    @property
    def aid_fields(self) -> list[Any]:
        """What the review aids show besides the pre-filled rows (`Editor.aids`)."""
        return [self.flags_note, self.aids, self.suggest_note]

    def texts_of(self, d: Inputs) -> dict[str, str]:
        return {"findings": d[self.findings] or "", "impression": d[self.impression] or ""}

    def boxes(self, texts: dict[str, str]) -> Outputs:
        return {self.findings: texts["findings"], self.impression: texts["impression"]}


def _conflict_and_draft_rows() -> dict[str, Any]:
    # rows of buttons offered only now and then: shown while their buttons are enabled
    # (page.css), since a layout's visibility update does not always reach the page
    with gr.Row(elem_id="conflict-row", elem_classes="rrg-offer"):
        keep_mine = gr.Button("Keep mine", elem_id="keep-mine", size="sm", variant="primary",
                              interactive=False)
        take_theirs = gr.Button("Take theirs", elem_id="take-theirs", size="sm",
                                interactive=False)
    with gr.Row():
        draft_button = gr.Button("Draft", interactive=False, elem_id="draft-button", size="sm")
        # an admin's button: shown once the page knows the reader is one (`wire_unload`)
        unload_button = gr.Button("Unload model", elem_id="unload-model", size="sm",
                                  visible=False)
    return {"keep_mine": keep_mine, "take_theirs": take_theirs, "draft_button": draft_button,
            "unload_button": unload_button, "model_line": gr.Markdown(elem_id="draft-model"),
            "draft_error": gr.Markdown(elem_id="draft-error")}


def _boxes_and_buttons() -> dict[str, Any]:
    parts: dict[str, Any] = {
        "findings": gr.Textbox(label="Findings (editable)", lines=7, max_lines=14,
                               elem_id="edit-findings"),
        "impression": gr.Textbox(label="Impression (editable)", lines=3, max_lines=8,
                                 elem_id="edit-impression"),
        "aids": gr.Textbox(elem_id="review-aids", elem_classes="rrg-hidden", container=False)}
    with gr.Row(elem_id="save-row"):
        parts["save_button"] = gr.Button("Save (Ctrl+S)", variant="primary", elem_id="save",
                                         size="sm")
        parts["revert_button"] = gr.Button("Revert to draft", elem_id="revert", size="sm")
        parts["accept_button"] = gr.Button("Accept draft (Alt+A)", elem_id="accept", size="sm")
    # the buttons say what they do: the status line that explains the question may be
    # replaced by an autosave's note before the reader reads it (a new-user trial); Revert
    # asks as Accept does: it sat beside Save and replaced the reader's text in one click, with
    # no undo on the page (a new-user trial)
    for action, verb, what in QUESTIONS:
        parts[f"{action}_confirm"], parts[f"{action}_cancel"] = _question(action, verb, what)
    return parts


# what each question's confirmation does, said in its own row: the status line's longer
# explanation came ~2 s after the buttons (Gradio renders Markdown later than a button's
# update) and pushed them 15-24 px down, so a click meant for Cancel landed on Accept draft
# above it (a new-user trial at 1366x768); the status line now asks in two lines at most
QUESTIONS = (
    ("accept", "Accept", "Accepting puts the draft in both boxes and marks the study "
                         "“Acceptable without changes”; your text stays in the history."),
    ("revert", "Revert to", "Reverting puts the draft back in both boxes; your text stays "
                            "in the history."))


def _question(action: str, verb: str, what: str) -> tuple[gr.Button, gr.Button]:
    """The rows that ask before `action` replaces the reader's own text with the draft: what
    it does, then its buttons (shown while the buttons are enabled: `Editor.offer`). The text
    is laid out with the page, hidden, so it is there the moment the buttons are."""
    with gr.Column(elem_id=f"{action}-confirm-row", elem_classes="rrg-offer"):
        gr.HTML(f'<p class="rrg-offer-note">{html.escape(what)}</p>')
        with gr.Row():
            confirm = gr.Button(f"{verb} the draft, replacing my edits",
                                elem_id=f"{action}-confirm", size="sm", variant="stop",
                                interactive=False)
            cancel = gr.Button("Cancel: keep my edits", elem_id=f"{action}-cancel",
                               size="sm", interactive=False)
    return confirm, cancel


def _rating() -> dict[str, Any]:
    with gr.Group(elem_id="rating"):
        with gr.Row(equal_height=True):
            likert = gr.Radio([1, 2, 3, 4, 5], label="Overall quality (keys 1-5)",
                              elem_id="likert", scale=3)
            acceptable = gr.Checkbox(label="Acceptable without changes", elem_id="acceptable",
                                     scale=2)
        rate_button = gr.Button("Submit rating (Alt+R)", elem_id="rate", size="sm",
                                variant="primary")
        rate_status = gr.Markdown(elem_id="rate-status")
    return {"likert": likert, "acceptable": acceptable, "rate_button": rate_button,
            "rate_status": rate_status}


def _rexval() -> dict[str, Any]:
    rexval: dict[tuple[str, str], gr.Number] = {}
    with gr.Accordion("ReXVal errors and comment", open=True, elem_id="rexval"):
        # the flags' reasons (their sentences are marked in the boxes) beside the counts, not
        # between the boxes and Save / Submit rating (kept on screen at 1366x768)
        flags_note = gr.HTML("", elem_id="draft-flags")
        with gr.Row(elem_classes="rexval-row"):
            gr.Markdown("**ReXVal errors** (counts)")
            gr.Markdown("clinically significant")
            gr.Markdown("insignificant")
        suggest_note = gr.HTML("", elem_id="rexval-suggested")
        checked = gr.Checkbox(label="I checked the suggested counts", elem_id="rexval-checked")
        for category in REXVAL_CATEGORIES:
            with gr.Row(elem_classes="rexval-row", equal_height=True):
                gr.Markdown(FORM_LABELS[category])
                for kind in ("significant", "insignificant"):
                    rexval[(category, kind)] = gr.Number(
                        # no minimum/precision here: Gradio would round 1.5 to 2 and answer
                        # -2 with a bare "Error"; the review service refuses both with a
                        # sentence the reader can act on
                        value=0, show_label=False, container=False,
                        label=f"{FORM_LABELS[category]} · {kind}",
                        elem_id=f"rexval-{category}-{kind}", min_width=80)
        comment = gr.Textbox(label="Comment", lines=2, elem_id="comment")
    return {"rexval": rexval, "comment": comment, "suggest_note": suggest_note,
            "checked": checked, "flags_note": flags_note}


def _draft_diff_reference() -> dict[str, Any]:
    with gr.Accordion("Model draft (read-only)", open=False, elem_id="model-draft") as model:
        new_findings = gr.Textbox(label="Draft findings", interactive=False, lines=4,
                                  elem_id="new-findings")
        new_impression = gr.Textbox(label="Draft impression", interactive=False, lines=2,
                                    elem_id="new-impression")
        use_draft = gr.Button("Use this draft in the boxes", elem_id="use-draft", size="sm")
    diff = gr.HighlightedText(label="Draft → current (word level)",
                              color_map={"+": "green", "-": "red"}, combine_adjacent=True,
                              elem_id="diff")
    with gr.Accordion("Reference report (dataset)", open=True, elem_id="reference") as reference:
        ref_findings = gr.Textbox(label="Reference findings", interactive=False, lines=3,
                                  elem_id="ref-findings")
        ref_impression = gr.Textbox(label="Reference impression", interactive=False, lines=2,
                                    elem_id="ref-impression")
    return {"model_draft": model, "new_findings": new_findings,
            "new_impression": new_impression, "use_draft": use_draft, "diff": diff,
            "reference": reference, "ref_findings": ref_findings,
            "ref_impression": ref_impression}


WITHDRAWN = "“Acceptable without changes” withdrawn: you edited the draft."


def rating_line(r: RatingView | None, edited: bool = False) -> str:
    """What the line under Submit rating says of the reader's latest rating of the study: a
    rating that only withdrew "acceptable without changes" (an edit after Accept) is not an
    acceptance (new-user trial 18 saw "Accepted without changes" beside the unticked box); a
    score given before the reader's latest saved text says so (`edited`: a new-user trial
    edited a rated study and saw only "Rated 4/5 at 07:08")."""
    if r is None:
        return ""
    if r.likert is not None and edited:
        return (f"Rated {r.likert}/5 at {r.created_at:%H:%M}, before your later edits: "
                "Submit rating again if the score or the counts change.")
    if r.likert is not None:
        return f"Rated {r.likert}/5 at {r.created_at:%H:%M}."
    return "Accepted without changes; no score yet." if r.acceptable else WITHDRAWN


class Editor:
    """The review panel's updates, shared by its handlers and the page's navigation: what a
    save, an opened study or an empty worklist puts on screen."""

    def __init__(self, panel: ReviewPanel, desk: Desk, tab: Tab) -> None:
        self.panel, self.desk, self.tab = panel, desk, tab

    @staticmethod
    def offer(*buttons: gr.Button, on: bool) -> Outputs:
        return {b: gr.update(interactive=on) for b in buttons}

    def offer_choice(self, session: Session, on: bool) -> Outputs:
        """Enable or disable "keep mine" / "take theirs", only when that changes: each button
        update costs Gradio a component rebuild, on every save and autosave tick."""
        if on == session.offered:
            return {}
        session.offered = on
        return self.offer(self.panel.keep_mine, self.panel.take_theirs, on=on)

    def after_save(self, r: Reader, saved: Saved, texts: dict[str, str],
                   client: Client | None = None) -> Outputs:
        """What a save (or a request that only saves) puts on screen. Its `sync` names the
        open study only where the request came from it (`client`): an answer that does not
        put that study's values in the boxes must not tell the page they are there. A tick
        sent from one study and answered after the tab had moved to the next told the page
        the next study was open while the boxes still held the last one's text, and the next
        request then carried that text as the new study's (found by a race script: row
        clicks and Alt+N within 50 ms). (Nor is its diff drawn against the next study's
        draft.)"""
        p, session = self.panel, r.session
        # (an Accept or Revert question still open stays under the save's note)
        message = f"{saved.message}<br>{session.question}" if session.question else saved.message
        out: Outputs = {self.tab.state: session, p.save_status: message,
                        **self.offer_choice(session, bool(saved.conflicts))}
        if client is None or client.study == session.study:
            out |= {self.tab.sync: sync_json(r.name, session),
                    p.diff: diff_of(self.desk.draft_texts(session), texts)}
        if saved.withdrawn:  # the box the reader ticked (or Accept did) says so too
            out |= {p.acceptable: False, p.rate_status: WITHDRAWN}
        elif self.desk.edited_after_rating(session, saved):
            out[p.rate_status] = rating_line(session.rated, edited=True)
        return out

    def rating_values(self, r: RatingView | None, edited: bool = False) -> Outputs:
        p = self.panel
        out: Outputs = {p.likert: r.likert if r else None,
                        p.acceptable: bool(r.acceptable) if r else False,
                        p.comment: (r.comment or "") if r else ""}
        for (category, kind), comp in p.rexval.items():
            # (a row pre-filled for the study before is no longer marked)
            out[comp] = gr.update(value=((r.errors.get(category) or {}).get(kind, 0)) if r else 0,
                                  elem_classes=[])
        out[p.checked] = False
        out[p.rate_status] = rating_line(r, edited)
        return out

    def aids(self, session: Session, texts: dict[str, str]) -> Outputs:
        """The review aids for the text on screen (issue #22): the flags (with the reference's:
        this page shows the reference anyway), the suggested ReXVal counts pre-filled in the
        rows the reader has not typed in (only the rows whose count changes are sent), and the
        tick unset whenever what is suggested changes."""
        p = self.panel
        if session.study is None:
            return {p.flags_note: "", p.aids: "", p.suggest_note: ""}
        view = self.desk.aids.view(self.desk.draft_texts(session), texts,
                                   has_prior=session.has_prior, reference=session.reference)
        out: Outputs = {p.flags_note: view.flags_html, p.aids: view.marks_json,
                        p.suggest_note: view.suggestion_html}
        counts = view.suggestion.counts()
        if counts != session.suggested:
            session.suggested = counts
            out[p.checked] = False
        for category, n in counts.items():
            if category not in session.own_rows and session.prefilled.get(category, 0) != n:
                session.prefilled[category] = n
                out[p.rexval[(category, "significant")]] = gr.update(
                    value=n, elem_classes=["rrg-suggested"] if n else [])
        return out

    def reset(self) -> Outputs:
        """What any study change clears first (no choice offered, no errors or notes)."""
        p = self.panel
        return {**self.offer(p.keep_mine, p.take_theirs, on=False),
                **self.offer(p.accept_confirm, p.accept_cancel, on=False),
                **self.offer(p.revert_confirm, p.revert_cancel, on=False),
                p.draft_error: "", p.restore_note: ""}

    def cleared(self, r: Reader, empty_note: str) -> Outputs:
        """No study open (an empty worklist)."""
        p = self.panel
        return {p.findings: "", p.impression: "", p.new_findings: "", p.new_impression: "",
                p.ref_findings: "", p.ref_impression: "", p.model_line: "",
                p.save_status: empty_note, p.draft_button: gr.update(interactive=False),
                p.diff: [], self.tab.sync: sync_json(r.name, r.session),
                **self.rating_values(None), **self.aids(r.session, {})}

    def opened(self, r: Reader, opened: Opened, can_draft: bool) -> Outputs:
        p, session, ref = self.panel, r.session, opened.view.reference
        drafts = self.desk.draft_texts(session)
        # a reader-study reading is blinded to the reference and drafts nothing: its panel
        # and button are not shown (an empty panel and a greyed Regenerate were: a new-user
        # trial)
        plain = session.reading is None
        return {p.findings: opened.texts["findings"], p.impression: opened.texts["impression"],
                p.new_findings: drafts["findings"], p.new_impression: drafts["impression"],
                p.reference: gr.update(visible=plain),
                p.ref_findings: (ref.findings or "") if ref else "",
                p.ref_impression: (ref.impression or "") if ref else "",
                p.model_line: opened.model_note,
                p.draft_error: self.desk.draft_errors(opened.drafts),
                # a report-only study has no image to draft from (trying said so in a Python
                # error's words: found in a new-user trial on Open-i)
                p.draft_button: gr.update(interactive=can_draft and bool(opened.view.images),
                                          value="Regenerate" if session.drafts else "Draft",
                                          visible=plain),
                p.save_status: opened.status, p.diff: diff_of(drafts, opened.texts),
                self.tab.sync: sync_json(r.name, session),
                **self.rating_values(opened.rating, session.edited_since_rated),
                **self.aids(session, opened.texts)}


@dataclass(frozen=True)
class Wiring:
    """What the review panel's events need from the page around them.

    rows(reader, inputs): the worklist's page and progress, refreshed (statuses change on
    save, rate and accept); follow(event): the worklist's refresh chained to a save, in its own
    request; metrics_step: the metrics panel's follow-up (`event.then(**metrics_step)`);
    edit_in: the inputs of every text-carrying event; with_client: its page-script
    preprocessor; rows_out: the worklist's table, progress line, page and page line;
    lists(reader), lists_out: the reader's study worklists and their outputs, refreshed with
    the rows by the heartbeat (a second tab went on saying "opened" and "to read" of readings
    signed in the first)."""

    services: Services
    desk: Desk
    guard: Guard
    editor: Editor
    rows: Callable[[int, Inputs], Outputs]
    follow: Callable[[Any], Any]
    metrics_step: dict[str, Any]
    edit_in: set[Any]
    with_client: dict[str, Any]
    rows_out: list[Any]
    lists: Callable[[Reader], Outputs]
    lists_out: list[Any]

    @property
    def edit_outs(self) -> list[Any]:
        p, tab = self.editor.panel, self.guard.tab
        return [tab.state, p.save_status, tab.sync, p.keep_mine, p.take_theirs, p.diff,
                p.acceptable, p.rate_status]

    @property
    def on_status(self) -> dict[str, Any]:
        """A button's request on its way shows Gradio's progress on the status line its answer
        is written to, not on each of its outputs: by default every output, the edit boxes
        among them, got an overlay that took clicks and ran a timer per frame."""
        return {"show_progress_on": [self.editor.panel.save_status], **self.with_client}


def wire_review(w: Wiring) -> None:
    """Every event of the review panel, in the page's order."""
    _wire_saving(w)
    _wire_choices(w)
    _wire_accept_and_rate(w)
    _wire_drafting(w)
    _wire_aids(w)


def _wire_aids(w: Wiring) -> None:
    """The review aids follow the boxes (typing, a revert, another tab's text, a new draft):
    recomputed on the server for the latest text only, never on the typing path (the page
    draws the marks once they are for the text in the box). A row the reader types in is
    theirs: it is never pre-filled again."""
    p, editor, tab = w.editor.panel, w.editor, w.guard.tab

    @w.guard(lock=False)
    def on_aids(r: Reader, d: Inputs) -> Outputs:
        return editor.aids(r.session, p.texts_of(d))

    def own_row(category: str) -> Callable[..., Any]:
        @w.guard(lock=False)
        def on_own_row(r: Reader, d: Inputs) -> None:
            w.desk.count_typed(r.session, category)
        return on_own_row

    outs = [*p.aid_fields, p.checked, *(p.rexval[(c, "significant")] for c in REXVAL_CATEGORIES)]
    for box in (p.findings, p.impression):
        box.change(on_aids, {tab.state, p.findings, p.impression}, outs, **LIGHT, **QUIET,
                   trigger_mode="always_last")
    for (category, _), comp in p.rexval.items():
        comp.input(own_row(category), {tab.state}, None, **LIGHT, **QUIET)


def _wire_saving(w: Wiring) -> None:
    """Save, the autosave tick and the live diff."""
    p, desk, editor, tab = w.editor.panel, w.desk, w.editor, w.guard.tab

    @w.guard
    def on_save(r: Reader, d: Inputs) -> Outputs:
        texts, client = p.texts_of(d), Client.parse(d[tab.client])
        return editor.after_save(r, desk.save(r.session, texts, client), texts, client)

    @w.guard
    def on_tick(r: Reader, d: Inputs) -> Outputs:
        session = r.session
        texts, now, client = p.texts_of(d), time.monotonic(), Client.parse(d[tab.client])
        saved = desk.tick(session, texts, client, now)
        if saved is None:
            newer = (desk.check_signed(session, client)
                     or desk.check_newer(session, client, texts) if client.visible else None)
            if newer is not None:
                return editor.after_save(r, newer, texts, client)
            out: Outputs = {p.save_status: gr.update()}
            if desk.draft_missed(session, now):  # (its change starts the wait again)
                out[tab.wanted] = wait_for_draft(session.study)
            if desk.rows_due(session, now):
                return {**out, **w.rows(r.id, d), **w.lists(r)}
            return out
        if not saved.wrote:
            return editor.after_save(r, saved, texts, client)
        # an autosave changes the study's status, minutes and scores like Save does: the
        # worklist row here, the metrics panel in the follow-up (found in a new-user trial)
        # that the new value of tab.rescore starts
        session.rescores += 1
        return {**editor.after_save(r, saved, texts, client), **w.rows(r.id, d),
                tab.rescore: str(session.rescores)}

    @w.guard(lock=False)
    def on_input(r: Reader, d: Inputs) -> Outputs:
        return {p.diff: diff_of(desk.draft_texts(r.session), p.texts_of(d))}

    saved_by_button = p.save_button.click(on_save, w.edit_in, w.edit_outs, api_name="save",
                                          queue=False, **w.on_status)
    saved_by_button.then(**w.metrics_step)
    w.follow(saved_by_button)
    tab.timer.tick(_idle_tick(tab, p, on_tick), w.edit_in,
                   [*w.edit_outs, *w.rows_out, *w.lists_out, tab.rescore, tab.wanted],
                   **LIGHT, **QUIET,
                   **w.with_client)
    for box in (p.findings, p.impression):
        box.input(on_input, {tab.state, p.findings, p.impression}, [p.diff], **LIGHT, **QUIET,
                  trigger_mode="always_last")


def _idle_tick(tab: Tab, p: ReviewPanel, on_tick: Callable[..., Outputs]) -> Callable[..., Any]:
    """A tick with no study open does nothing, not even look up the reader."""
    def on_tick_open(d: Inputs, request: gr.Request) -> Outputs:
        if d[tab.state].study is None:
            return {p.save_status: gr.update()}
        return on_tick(d, request)
    on_tick_open.__name__ = "on_tick"
    return on_tick_open


def _wire_choices(w: Wiring) -> None:
    """Keep mine / Take theirs after a conflict; Revert / Use this draft."""
    p, desk, editor, tab = w.editor.panel, w.desk, w.editor, w.guard.tab

    @w.guard
    def on_keep_mine(r: Reader, d: Inputs) -> Outputs:
        texts = p.texts_of(d)
        saved = desk.keep_mine(r.session, texts, Client.parse(d[tab.client]))
        shown = saved.texts or texts
        # only a box whose text the choice replaced (a section the reader had not changed):
        # the others keep whatever was typed since the click
        boxes = {box: shown[s] for s, box in (("findings", p.findings),
                                              ("impression", p.impression))
                 if shown[s] != texts[s]}
        return {**editor.after_save(r, saved, shown), **boxes}

    @w.guard
    def on_take_theirs(r: Reader, d: Inputs) -> Outputs:
        texts, saved = desk.take_theirs(r.session, p.texts_of(d), Client.parse(d[tab.client]))
        return {**editor.after_save(r, saved, texts), **p.boxes(texts)}

    boxes_out = [*w.edit_outs, p.findings, p.impression]
    kept_mine = p.keep_mine.click(on_keep_mine, w.edit_in, boxes_out, **LIGHT, **w.on_status)
    kept_mine.then(**w.metrics_step)
    w.follow(kept_mine)
    # each of these stores a revision: the metrics panel follows it (after a Revert it still
    # scored the text reverted from until the study was opened again: a new-user trial)
    p.take_theirs.click(on_take_theirs, w.edit_in, boxes_out, **LIGHT, **w.on_status
                        ).then(**w.metrics_step)
    _wire_revert(w, boxes_out)
    on_use_draft = _draft_in_boxes(w, "The draft is in the boxes (autosaved shortly, or Save).")
    p.use_draft.click(on_use_draft, w.edit_in, boxes_out, **LIGHT, **w.on_status
                      ).then(**w.metrics_step)


def _wire_revert(w: Wiring, boxes_out: list[Any]) -> None:
    """Revert to draft: over the reader's own text (typed or saved) it asks first, as Accept
    does, and replaces the boxes only on "Revert to the draft, replacing my edits"."""
    p, desk, editor, tab = w.editor.panel, w.desk, w.editor, w.guard.tab
    revert = _draft_into_boxes(w, "Reverted to the draft.")
    # one question at a time: Revert's closes an Accept question still open (a new-user
    # trial pressed Accept, then Revert: two rows of confirmations, Submit rating pushed
    # below the fold at 1366x768), and Accept's closes Revert's (`_wire_accept_and_rate`)
    accept_off = editor.offer(p.accept_confirm, p.accept_cancel, on=False)
    asked = {**editor.offer(p.revert_confirm, p.revert_cancel, on=True), **accept_off}
    closed = {**editor.offer(p.revert_confirm, p.revert_cancel, on=False), **accept_off}

    @w.guard
    def on_revert(r: Reader, d: Inputs) -> Outputs:
        own = desk.own_sections(r.session, p.texts_of(d))
        r.session.question = ""
        if not own:
            return {**revert(r, d), **closed}
        r.session.question = asking("Revert", own)
        return {tab.state: r.session, **asked, p.save_status: r.session.question}

    @w.guard
    def on_revert_confirm(r: Reader, d: Inputs) -> Outputs:
        r.session.question = ""
        return {**revert(r, d), **closed}

    @w.guard
    def on_revert_cancel(r: Reader, d: Inputs) -> Outputs:
        r.session.question = ""
        return {tab.state: r.session, **closed, p.save_status: "Not reverted: your text stays."}

    outs = [*boxes_out, p.revert_confirm, p.revert_cancel, p.accept_confirm, p.accept_cancel]
    p.revert_button.click(on_revert, w.edit_in, outs, **LIGHT, **w.on_status
                          ).then(**w.metrics_step)
    p.revert_confirm.click(on_revert_confirm, w.edit_in, outs, **LIGHT, **w.on_status
                           ).then(**w.metrics_step)
    p.revert_cancel.click(on_revert_cancel, {tab.state},
                          [tab.state, p.revert_confirm, p.revert_cancel, p.accept_confirm,
                           p.accept_cancel, p.save_status], **LIGHT)


def _draft_in_boxes(w: Wiring, message: str) -> Callable[..., Any]:
    """Use this draft (see `_draft_into_boxes`), as a guarded handler."""
    return w.guard(_draft_into_boxes(w, message))


def _draft_into_boxes(w: Wiring, message: str) -> Callable[[Reader, Inputs], Outputs]:
    """Revert / Use this draft: the draft's text into the editable boxes, stored at once as
    the reader's revision (`Desk.put_draft`). What the reader had typed and not stored is
    saved first (an autosave revision), so it stays in the history: replacing both boxes at
    once must never lose words (found in a new-user trial). A conflict with another tab's
    save stops it: the reader's text stays on screen with "keep mine" / "take theirs"."""
    p, desk, editor, tab = w.editor.panel, w.desk, w.editor, w.guard.tab

    def draft_in_boxes(r: Reader, d: Inputs) -> Outputs:
        session, typed, client = r.session, p.texts_of(d), Client.parse(d[tab.client])
        kept = (desk.save(session, typed, client, autosave=True)
                if desk.pending(session, typed, client, typed_only=True) else None)
        if kept is not None and not kept.ok:
            return editor.after_save(r, kept, typed, client)
        texts = desk.draft_texts(session)
        stored = ", ".join(f"{sec} revision {n}" for sec, n in session.base.items()
                           if n is not None and session.shown.get(sec) != texts[sec])
        put = desk.put_draft(session, client)
        if not put.ok:  # another tab saved meanwhile: its choice, the reader's text on screen
            return editor.after_save(r, put, typed, client)
        note = (f" Your text is kept in the history ({kept.message})."
                if kept is not None and kept.wrote else
                f" Your saved text stays in the history ({stored})." if stored else "")
        done = f" The draft is saved ({put.message})." if put.wrote else ""
        # (the typed text saved first may have withdrawn "acceptable without changes": the box
        # unticks, as after any save that does; new-user trial 18 saw it stay ticked)
        told = Saved(message + done + note, {}, put.wrote,
                     withdrawn=kept is not None and kept.withdrawn)
        return {**editor.after_save(r, told, texts), **p.boxes(texts)}

    return draft_in_boxes


def _accepted(w: Wiring, r: Reader, texts: dict[str, str]) -> Outputs:
    """The page after an Accept: the draft in the boxes, the box ticked, and the suggested
    counts of the draft now in the boxes, in the same answer (a Rate right after it sent the
    last edit's suggested count, and was refused beside the accepted draft: a loaded browser
    run)."""
    p, desk, session = w.editor.panel, w.desk, r.session
    return {**p.boxes(texts), p.diff: diff_of(desk.draft_texts(session), texts),
            w.guard.tab.sync: sync_json(r.name, session), p.acceptable: True,
            p.rate_status: "Accepted without changes; choose a score (1-5) and submit.",
            **w.editor.aids(session, texts)}


def _on_accept_cancel(w: Wiring) -> Callable[..., Any]:
    """Cancel on Accept's question: nothing accepted, the question closed."""
    p, tab = w.editor.panel, w.guard.tab

    @w.guard
    def on_accept_cancel(r: Reader, d: Inputs) -> Outputs:
        r.session.question = ""
        return {tab.state: r.session, p.save_status: "Not accepted.",
                **w.editor.offer(p.accept_confirm, p.accept_cancel, on=False)}
    return on_accept_cancel


def _wire_accept_and_rate(w: Wiring) -> None:
    """Accept the draft as is (asking first over the reader's own text), and the rating."""
    p, desk, editor, tab = w.editor.panel, w.desk, w.editor, w.guard.tab

    def accept(confirmed: bool) -> Callable[..., Any]:
        @w.guard
        def on_accept(r: Reader, d: Inputs) -> Outputs:
            session = r.session
            session.question = ""
            result = desk.accept(session, p.texts_of(d), Client.parse(d[tab.client]),
                                 confirmed)
            session.question = result.message if result.needs_confirm else ""
            out = {tab.state: session, p.save_status: result.message,
                   **editor.offer(p.accept_confirm, p.accept_cancel, on=result.needs_confirm),
                   **editor.offer(p.revert_confirm, p.revert_cancel, on=False),
                   **editor.offer_choice(session, bool(session.conflicts))}
            if result.texts is not None:
                out.update({**_accepted(w, r, result.texts), **w.rows(r.id, d)})
            return out
        return on_accept

    asked_off = {**editor.offer(p.accept_confirm, p.accept_cancel, on=False),
                 **editor.offer(p.revert_confirm, p.revert_cancel, on=False)}

    on_rate = w.guard(_on_rate(w, asked_off))

    accept_outs = [tab.state, p.save_status, p.accept_confirm, p.accept_cancel,
                   p.revert_confirm, p.revert_cancel, p.keep_mine,
                   p.take_theirs, p.findings, p.impression, p.diff, tab.sync, p.acceptable,
                   p.rate_status, *w.rows_out, *p.aid_fields, p.checked,
                   *(p.rexval[(c, "significant")] for c in REXVAL_CATEGORIES)]
    p.accept_button.click(accept(False), w.edit_in, accept_outs, **LIGHT, **w.on_status
                          ).then(**w.metrics_step)
    p.accept_confirm.click(accept(True), w.edit_in, accept_outs, **LIGHT, **w.on_status
                           ).then(**w.metrics_step)
    p.accept_cancel.click(_on_accept_cancel(w), {tab.state},
                          [tab.state, p.accept_confirm, p.accept_cancel, p.save_status], **LIGHT)
    rate_in = {tab.state, *p.rating_fields, *w.edit_in}
    p.rate_button.click(on_rate, rate_in,
                        list(dict.fromkeys([*w.edit_outs, *w.rows_out, *asked_off])),
                        api_name="rate", queue=False, show_progress_on=[p.rate_status],
                        js=tab.client_js(rate_in, (p.findings, p.impression)))


def _on_rate(w: Wiring, asked_off: Outputs) -> Callable[[Reader, Inputs], Outputs]:
    """Submit rating: what was typed is saved first, then the rating is stored for that text
    (`Desk.rate` says what is refused); `asked_off` closes an Accept or Revert question."""
    p, desk, editor, tab = w.editor.panel, w.desk, w.editor, w.guard.tab

    def on_rate(r: Reader, d: Inputs) -> Outputs:
        errors: dict[str, dict[str, object]] = {}
        for (category, kind), comp in p.rexval.items():
            errors.setdefault(category, {})[kind] = d[comp]
        # what was typed is saved first, as a move away saves it: a score given a second after
        # an edit was stored against the text before it, and the edit's autosave then said
        # the score came "before your later edits" (a new-user trial, 5 of 5); a save refused
        # (another tab's newer text, not settled) rates nothing
        texts, client = p.texts_of(d), Client.parse(d[tab.client])
        saved = desk.save(r.session, texts, client, autosave=True)
        before = editor.after_save(r, saved, texts, client) if saved.wrote or not saved.ok \
            else {}
        if not saved.ok or r.session.conflicts:
            return {**before, p.rate_status: "⚠ Not rated: another save of this study is newer "
                                             "than your text; choose Keep mine or Take theirs "
                                             "(above) first."}
        if saved.message.startswith("⚠"):
            return {**before, p.rate_status: f"⚠ Not rated: your text is not saved. "
                                             f"{saved.message.removeprefix('⚠ ')}"}
        ok, message = desk.rate(r.session, d[p.likert], d[p.acceptable], errors, d[p.comment],
                                texts, bool(d[p.checked]))
        if not ok:
            return {**before, p.rate_status: message}
        # a rated study is finished: a question still open (Accept or Revert over the reader's
        # text) is answered by the rating, and stood armed under it (a new-user trial); the
        # status line above says so too (it still asked for the score: a new-user trial)
        r.session.question = ""
        return {**before, p.rate_status: message, p.save_status: message, **w.rows(r.id, d),
                **asked_off}
    return on_rate


def _drafts_arrived(w: Wiring, r: Reader, d: Inputs) -> Outputs:
    """New drafts, with the boxes as they are now (the reader may have typed while the model
    ran): the draft goes into each box that holds no text of the reader's own; beside the
    others (`Desk.refresh_drafts`). Only the boxes that take it are sent."""
    p, desk, tab, session = w.editor.panel, w.desk, w.guard.tab, r.session
    texts = p.texts_of(d)
    came = desk.refresh_drafts(session, texts)
    fresh, shown = came.fresh, desk.draft_texts(session)
    out = {tab.state: session, p.model_line: desk.model_note(came.drafts),
           p.new_findings: shown["findings"], p.new_impression: shown["impression"],
           p.draft_button: gr.update(value="Regenerate" if came.drafts else "Draft"),
           tab.sync: sync_json(r.name, session), p.diff: diff_of(shown, {**texts, **fresh}),
           **w.rows(r.id, d)}
    out.update({p.findings: fresh["findings"]} if "findings" in fresh else {})
    out.update({p.impression: fresh["impression"]} if "impression" in fresh else {})
    failed = desk.draft_errors(came.drafts)
    if failed:
        out[p.draft_error] = failed
    kept = " and ".join(s for s in SECTIONS if s in came.own)
    if fresh and kept:
        # ("your findings is kept" read badly: a new-user trial)
        out[p.save_status] = (f"The new draft is in the {' and '.join(fresh)} box. Your own "
                              f"{kept} text is kept, with the new draft beside it (Model "
                              "draft).")
    elif came.new and kept:
        out[p.save_status] = "The new draft is beside your text (Model draft); your text is kept."
    elif kept:  # a failed draft offers no new draft (it said both: a fourth new-user trial)
        out[p.save_status] = "No new draft; your text is kept."
    else:
        out[p.save_status] = desk.status_line(session)
    return out


def drafted_outputs(w: Wiring) -> list[Any]:
    p, tab = w.editor.panel, w.guard.tab
    return [tab.state, p.model_line, p.new_findings, p.new_impression, p.draft_button,
            p.draft_error, tab.sync, p.findings, p.impression, p.diff, p.save_status,
            *w.rows_out]


def _wire_drafting(w: Wiring) -> None:
    """Draft (or regenerate) on request, and unload the model (admins)."""
    p, services, tab = w.editor.panel, w.services, w.guard.tab
    drafting, preset = services.drafting, services.preset

    @w.guard
    def on_draft_done(r: Reader, d: Inputs) -> Outputs:
        """After drafting on request (`_drafts_arrived`)."""
        if r.session.study is None or drafting is None or r.session.reading is not None:
            return {p.save_status: gr.update()}
        return _drafts_arrived(w, r, d)

    @w.guard(lock=False)
    def on_unload(r: Reader, d: Inputs) -> Outputs:
        """Free the model's memory (GPU included) for everyone: admins only."""
        account = services.accounts.by_id(r.id)
        if account is None or not account.is_admin:
            raise gr.Error("only an admin can unload the model")
        if drafting is not None:
            drafting.unload()
        return {p.model_line: f"Model `{html.escape(preset)}` unloaded; it loads again on the "
                              "next draft."}

    done = p.draft_button.click(_on_draft(w), w.edit_in, [
        tab.state, p.new_findings, p.new_impression, p.draft_error, tab.sync, p.diff,
        p.save_status, p.model_draft, p.keep_mine, p.take_theirs], **PRIVATE,
        **w.with_client).then(on_draft_done, w.edit_in, drafted_outputs(w), **PRIVATE,
                              js=tab.client_js(w.edit_in, (p.findings, p.impression), draft=True))
    done.then(**w.metrics_step)
    done.then(**DRAFT_LANDED)
    p.unload_button.click(on_unload, {tab.state}, [p.model_line], **PRIVATE)


def wire_unload(w: Wiring, loaded: Any) -> None:
    """Unload model is shown to admins once the page has loaded. A reader saw it too (in a
    blinded reading as well): a click said "Error: only an admin can unload the model" and
    left a red badge on the page (a new-user trial). The server refuses a reader's unload
    either way (`on_unload`)."""
    p, tab, accounts = w.editor.panel, w.guard.tab, w.services.accounts

    @w.guard(lock=False)
    def on_loaded(r: Reader, d: Inputs) -> Outputs:
        account = accounts.by_id(r.id)
        return {p.unload_button: gr.update(visible=account is not None and account.is_admin)}

    loaded.then(on_loaded, {tab.state}, [p.unload_button], **PRIVATE)


def _on_draft(w: Wiring) -> Callable[..., Any]:
    p, desk, editor, tab = w.editor.panel, w.desk, w.editor, w.guard.tab
    drafting, preset = w.services.drafting, w.services.preset

    def on_draft(d: Inputs, request: gr.Request) -> Iterator[Outputs]:
        """Draft (or regenerate): the reader's text is saved first and never replaced; the
        new draft streams into the read-only draft boxes, and into the editable boxes only
        where the reader has no text of their own. A failure is shown beside the boxes.
        (A stream: the reader is checked by the guard's dependency, under the tab's lock
        only while the text is saved.)"""
        session = d[tab.state]
        with session.lock:  # (left before anything is yielded: Gradio may run the stream's
            # next step in another thread, which could not release it)
            r = w.guard.reader(session, request)
            texts, study = p.texts_of(d), session.study
            stop: Outputs | None = None
            if session.reading is not None:  # a reading's draft is its arm's
                stop = {p.save_status: "A reader-study reading shows its own draft; there is "
                                       "nothing to draft."}
            elif study is None or drafting is None:
                stop = {p.save_status: gr.update()}
            else:
                client = Client.parse(d[tab.client])
                saved = desk.leave(session, texts, client, time.monotonic())
                if not saved.ok:
                    stop = editor.after_save(r, saved, texts, client)
            # (its status lines numbered as a guarded handler's are: `deps.numbered`)
            stop = with_number(session, stop, p.save_status)
        if stop is not None or study is None or drafting is None:
            yield stop or {p.save_status: gr.update()}
            return
        yield with_number(session, {p.model_draft: gr.update(open=True), p.draft_error: "",
                                    p.save_status: f"Drafting with `{html.escape(preset)}` …"},
                          p.save_status)
        for out in _stream(p, drafting, study, preset):
            yield with_number(session, out, p.save_status)

    return on_draft


def _stream(p: ReviewPanel, drafting: DraftingService, study: int,
            preset: str) -> Iterator[Outputs]:
    streamed = {"findings": "", "impression": ""}
    errors: list[str] = []
    try:  # one stream for both sections: a whole-report model generates once
        for step in drafting.stream_study(study, preset, SECTIONS):
            streamed.update(step.texts)
            errors = [f"{s}: {e}" for s, e in step.errors.items()]
            yield {p.new_findings: streamed["findings"],
                   p.new_impression: streamed["impression"]}
    except Exception as exc:  # shown to the reader, never a stack trace
        log.warning("drafting study %s with %s failed", study, preset, exc_info=True)
        errors.append(f"{type(exc).__name__}: {exc}")
    yield {p.draft_error: ("⚠ Draft failed — " + "; ".join(html.escape(e) for e in errors))
           if errors else "", p.save_status: "Draft finished."}


def wire_draft_arrival(w: Wiring) -> None:
    """After any event that opens a study (the page load, a worklist row, Previous/Next)
    whose study had no draft yet but is queued for one (`Tab.wanted` changes): the page opens
    at once, and the draft goes in when the pre-drafter has it (waiting beside the page: no
    limit on how many tabs wait at a time). Only the page load waited: a study opened from the
    worklist said "Drafting this study…" and its draft never reached the boxes until the
    reader left it and came back (a new-user trial). The wait is the change event of a state,
    not a follow-up of every navigation: a reader flipping through drafted studies sends two
    requests a study, as before, and stays within the fair rate (app/fair.py)."""
    p, desk, tab = w.editor.panel, w.desk, w.guard.tab
    drafting, preset = w.services.drafting, w.services.preset

    async def on_await_draft(d: Inputs, request: gr.Request) -> Outputs:
        """Wait for the pre-drafter beside the page (usable meanwhile; no session lock held,
        no worker thread taken). The next step reads the boxes."""
        session = d[tab.state]
        await asyncio.to_thread(w.guard.reader, session, request)  # (a database lookup)
        return {tab.awaited: await desk.await_draft(session)}

    @w.guard
    def on_draft_ready(r: Reader, d: Inputs) -> Outputs:
        """The awaited draft into the boxes (or beside the reader's text), if its study is
        still open and still had no draft; else nothing changes."""
        session, study = r.session, d[tab.awaited]
        if study is None or session.study != study or session.drafts or drafting is None \
                or session.reading is not None:
            return {p.save_status: gr.update()}
        if not drafting.latest(study, preset):  # timed out, or the model is unavailable
            session.predrafting = False  # "No draft yet" from now on, not "Drafting…"
            return {p.save_status: desk.status_line(session), p.model_line: desk.model_note({})}
        # done with (a failed draft too: "No draft yet", and the page is not asked to wait
        # for it again)
        session.predrafting = False
        return _drafts_arrived(w, r, d)

    # each change waits on its own ("multiple"): by default Gradio defers a change behind a
    # pending one and drops it when that one fails
    ready = tab.wanted.change(
        on_await_draft, {tab.state}, [tab.awaited], **PRIVATE, **QUIET, concurrency_limit=None,
        trigger_mode="multiple"
    ).then(on_draft_ready, w.edit_in | {tab.awaited}, drafted_outputs(w), **PRIVATE, **QUIET,
           js=tab.client_js(w.edit_in | {tab.awaited}, (p.findings, p.impression), draft=True))
    ready.then(**w.metrics_step)
    ready.then(**DRAFT_LANDED)
