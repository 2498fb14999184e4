"""What the page's panels are given: the services, built once (by `serve`, or by `Services.plain`
for tests and benches) and passed down, so no panel builds a service of its own; the tab's
shared plumbing (`Tab`); and, like the current-user dependency of fastapi's full-stack template
(`api/deps.py`), the one place where a handler's reader is resolved and checked (`Guard`)."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

import gradio as gr

from rrg_review.app.accounts.service import LOCAL_READER, AccountService
from rrg_review.app.review.desk import Desk, Session, TabRefused
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.service import WorklistService

if TYPE_CHECKING:
    from rrg_review.app.drafting.service import DraftingService, PreDrafter
    from rrg_review.app.evaluation.export import ExportService
    from rrg_review.app.evaluation.study_metrics import StudyMetrics
    from rrg_review.app.reader_study.reading import ReadingDesk
    from rrg_review.app.viewer.service import StudyViewer


@dataclass(frozen=True)
class Services:
    """One of each service the page calls, on one database.

    viewer: the study images; review: revisions, ratings, timing; worklists: each reader's
    list; accounts: who a login is, who is an admin; exports: the evaluation report (None: the
    page has no export, e.g. a bench); drafting/predrafter/preset: the model drafts (None: no
    drafting set up); metrics: the metrics panel; login: whether readers sign in (else the one
    local reader); readings: reader-study readings (None: the page opens none)."""

    viewer: StudyViewer
    review: ReviewService
    worklists: WorklistService
    accounts: AccountService
    exports: ExportService | None = None
    drafting: DraftingService | None = None
    predrafter: PreDrafter | None = None
    preset: str = "retrieval"
    metrics: StudyMetrics | None = None
    login: bool = False
    readings: ReadingDesk | None = None

    @classmethod
    def plain(cls, viewer: StudyViewer, drafting: DraftingService | None = None,
              predrafter: PreDrafter | None = None, preset: str = "retrieval",
              metrics: StudyMetrics | None = None, login: bool = False) -> Services:
        """Services with default settings on the viewer's database (tests and benches; `serve`
        builds its own from the command line's settings)."""
        from rrg_review.app.evaluation.export import ExportService
        from rrg_review.app.reader_study.reading import ReadingDesk
        from rrg_review.app.reader_study.service import ReaderStudyService

        accounts = AccountService(viewer.db)
        readings = ReadingDesk(ReaderStudyService(viewer.db, ()), accounts.audit)
        return cls(viewer, ReviewService(viewer.db, accounts.audit), WorklistService(viewer.db),
                   accounts, ExportService(viewer.db, accounts.audit), drafting, predrafter,
                   preset, metrics, login, readings)


AUTOSAVE_S = 4.0  # the autosave timer; also the heartbeat of active time
PRIVATE: dict[str, Any] = {"api_visibility": "private"}  # the page's own events, not a public API
LIGHT: dict[str, Any] = {"queue": False, **PRIVATE}  # light, quick events skip the queue
# what the page does on its own while the reader types (autosave ticks, the diff, a draft
# arriving after the page opened) shows no progress overlay: on every keystroke it would
# dim the diff; the metrics panel keeps its overlay (scoring with real weights takes seconds).
# Opening a study shows none either: page.js dims the film, the lists and the boxes itself
# (`rrg-leaving`, page.css), where Gradio's overlays over the film and the lists were drawn
# and animated with the page around them (Chromium's CPU per Alt+N 0.35 -> 0.29 s, per page
# load 2.45 -> 2.16 s, on the demo's four studies; an earlier default put an overlay on every
# one of a navigation's 58 outputs: 12.9 s of the browser's CPU for 2 loads and 16 steps)
QUIET: dict[str, Any] = {"show_progress": "hidden"}


def track_quiet_progress_on(ui: gr.Blocks, anchor: gr.components.Component) -> int:
    """Point the loading status of every event that shows no progress (`QUIET`, and the
    panels' own `show_progress="hidden"`) at one hidden component, `anchor`, instead of at all
    its outputs; returns how many events that is.

    Gradio's page keeps a loading status for each output of every event it has sent, and on
    each status change of any event (sent, answered) updates every status it keeps: after a
    page load, about 70 components, twice or more per request, each a re-render of that
    component's status tracker. Shown nowhere for these events, that was a third of the
    browser's CPU for each Alt+N and each typed sentence (Chromium's renderer on the demo's
    studies, medians of 3, two runs: Alt+N 0.73 -> 0.47-0.51 CPU-s, typing a sentence 0.52 ->
    0.35-0.36, a page load 3.57 -> 3.0-3.4, idle no different; six review-session tests run
    one after another: the machine's busy CPU 196 -> 163 s). What the status drives is the
    overlay these events hide."""
    quiet = [fn for fn in ui.fns.values()
             if fn.show_progress == "hidden" and fn.show_progress_on is None]
    for fn in quiet:
        fn.show_progress_on = [anchor]
    return len(quiet)


def arrived(kind: str) -> dict[str, Any]:
    """The browser-only step (a function of static/page.js, no request) after a navigation's
    answer: `kind` "step" (Previous/Next) or "row" (a worklist row), see `rrgArrived`."""
    return {"fn": None, "js": f"() => {{ window.rrgArrived({json.dumps(kind)}); }}", **PRIVATE}


# after an answer that may put a draft into the boxes (see `Tab.client_js(draft=True)`)
DRAFT_LANDED: dict[str, Any] = {"fn": None, "js": "() => { window.rrgDraftLanded(); }",
                                **PRIVATE}


@dataclass(frozen=True)
class Tab:
    """What every panel of one page shares: the tab's state and the page script's plumbing
    (hidden by CSS, so it is in the page)."""

    state: gr.State  # the tab's `Session`
    # a study opened with no draft that the pre-drafter has queued (`wait_for_draft`): a new
    # value starts the wait for its draft; `awaited` is the study that wait ended for. A hidden
    # text, not a State: Gradio starts a State's change event only after a queued event, and
    # the autosave tick, which asks again for a draft that never arrived, is not queued
    wanted: gr.Textbox
    awaited: gr.State
    sync: gr.Textbox  # what the page script needs to guard unsaved text (`sync_json`)
    client: gr.Textbox  # the page's report, filled in by every text-carrying event
    # an autosave that stored text writes a new value here; its change event rescores the
    # metrics panel (a tick that saved nothing sends no second request)
    rescore: gr.Textbox
    timer: gr.Timer
    # the page clicks it when an answer older than one it has drawn lands (see `sync_json`):
    # the open study, drawn again as the server has it
    redraw: gr.Button
    # the page clicks it when a status line older than one it has shown lands (see
    # `numbered`): the newest one is put back, in the browser (no request)
    status_again: gr.Button

    @classmethod
    def build(cls) -> Tab:
        def hidden(elem_id: str) -> gr.Textbox:
            return gr.Textbox(elem_id=elem_id, elem_classes="rrg-hidden", container=False)

        return cls(gr.State(Session()), hidden("wanted"), gr.State(None), hidden("sync"),
                   hidden("client"), hidden("rescore"), gr.Timer(AUTOSAVE_S),
                   gr.Button(elem_id="redraw", elem_classes="rrg-hidden"),
                   gr.Button(elem_id="status-again", elem_classes="rrg-hidden"))

    def client_js(self, inputs: Iterable[Any], texts: Iterable[gr.Textbox] = (),
                  draft: bool = False) -> str:
        """A JS preprocessor that fills the hidden `client` input with the page's report at
        the moment of the event (`rrgWithClient` in static/page.js; Gradio orders dict inputs
        by component id), telling the page script which texts this request carries (the
        findings and impression boxes, when they are inputs), so a later load recognises a
        revision this tab saved itself, and where the `sync` value gathered with them is: the
        study those texts belong to (the page's copy of #sync can be a step behind).

        `draft`: the answer may put a new draft into the boxes, judged by the texts gathered
        now; the page then keeps any key typed before it lands (`rrgDraftAsked`; follow the
        event with `DRAFT_LANDED`)."""
        order = sorted(inputs, key=lambda b: b._id)
        carried = {t.elem_id.removeprefix("edit-"): order.index(t)
                   for t in texts if t in order and t.elem_id}
        sync = order.index(self.sync) if self.sync in order else -1
        call = (f"window.rrgWithClient(a, {len(order)}, {order.index(self.client)}, "
                f"{json.dumps(carried)}, {sync})")
        return f"(...a) => window.rrgDraftAsked({call})" if draft else f"(...a) => {call}"


def wait_for_draft(study: int | None) -> str:
    """A new value of `Tab.wanted`: the page waits for this study's draft (again)."""
    return f"{study} {time.monotonic_ns()}"


_Out = TypeVar("_Out")


def numbered(session: Session, value: Any) -> Any:
    """A status line's text with its answer's number, as an empty element the page does not
    show (`<span data-n="N"></span>`), counted with `sync_json`'s under the tab's lock. Two
    answers can land in the other order than they were handled: an autosave tick handled
    before Alt+A, its answer heavier with the worklist's rows, put "saved as revision 1
    (autosave)" over Accept's question; a tick's note replaced Sign's refusal (loaded runs).
    The page puts back the newest line it was given (static/page.js `rrgStatusSet`). An
    update with no new text (`gr.update()`) is left as it is."""
    text = value.get("value") if isinstance(value, dict) else value
    if not isinstance(text, str):
        return value
    session.answers += 1
    text = f'{text}<span data-n="{session.answers}"></span>'
    return {**value, "value": text} if isinstance(value, dict) else text


def with_number(session: Session, out: _Out, status: Any) -> _Out:
    """An answer's outputs with the status line's new text `numbered`, under the tab's lock
    (held already by a guarded handler; taken here by a stream's later steps)."""
    if status is None or not isinstance(out, dict) or status not in out:
        return out
    with session.lock:
        return cast(_Out, {**out, status: numbered(session, out[status])})


def sync_json(reader: str, session: Session) -> str:
    """What the page script needs to know to guard unsaved text (see static/page.js), and
    which drafts are on screen (a new draft id tells the page a Draft click has landed).

    Each answer is numbered (`n`), under the tab's lock like the handler that builds it: two
    answers can reach the page in the other order than they were handled (a Save's own
    request and a row's queued one; a Revert's answer, handled before a row click, landed
    after it in a loaded run: the first patient's draft text beside the next one's film). The
    page draws none older than one it has drawn, and asks for the open study again
    (`Tab.redraw`)."""
    session.answers += 1
    return json.dumps({"reader": reader, "study": session.study, "base": session.base,
                       "shown": session.shown, "n": session.answers,
                       "drafts": {s: d[0] for s, d in session.drafts.items()},
                       "signed": session.reading is not None and session.signed})


@dataclass(frozen=True)
class Reader:
    """The authenticated reader of one request, bound to the tab's state."""

    name: str
    id: int
    session: Session
    query: dict[str, str] = field(default_factory=dict)  # the page address's query


Inputs = dict[Any, Any]  # Gradio's {component: value} of an event's inputs
Outputs = dict[Any, Any]  # {component: update} of an event's outputs


class Guard:
    """Resolves and checks the reader of every handler: the login of the authenticated request
    (or the one local reader without logins) must be a reader in the database and the one the
    tab's state was created for; anything else is refused with a sentence (`gr.Error`)."""

    def __init__(self, desk: Desk, tab: Tab, login: bool, status: Any = None) -> None:
        self.desk, self.tab, self.login = desk, tab, login
        self.status = status  # the status line, whose every new text is `numbered`

    def reader(self, session: Session, request: gr.Request | None) -> Reader:
        """The dependency itself, for the few handlers a decorator cannot wrap (a stream, a
        wait beside the page)."""
        name = getattr(request, "username", None) if self.login else LOCAL_READER
        if not name:
            raise gr.Error("Not logged in.")
        try:
            reader = self.desk.bind(session, name)
        except TabRefused as exc:
            raise gr.Error(str(exc)) from None
        session.address = getattr(getattr(request, "client", None), "host", None)
        query = getattr(request, "query_params", None) or {}
        return Reader(name, reader, session, {str(k): str(v) for k, v in dict(query).items()})

    @overload
    def __call__(self, fn: Callable[[Reader, Inputs], Any], *,
                 lock: bool = True) -> Callable[[Inputs, gr.Request], Any]: ...

    @overload
    def __call__(self, fn: None = None, *, lock: bool = True
                 ) -> Callable[[Callable[[Reader, Inputs], Any]],
                               Callable[[Inputs, gr.Request], Any]]: ...

    def __call__(self, fn: Callable[[Reader, Inputs], Any] | None = None, *,
                 lock: bool = True) -> Any:
        """`@guard` (or `@guard(lock=False)` for read-only handlers): the handler gets the
        `Reader` and the inputs, under the tab's lock (one handler of a tab at a time)."""
        if fn is None:
            return functools.partial(self, lock=lock)
        return self._wrap(fn, lock)

    def _wrap(self, fn: Callable[[Reader, Inputs], Any],
              lock: bool) -> Callable[[Inputs, gr.Request], Any]:
        state = self.tab.state

        def handler(d: Inputs, request: gr.Request) -> Any:
            session = d[state]
            if not lock:
                return fn(self.reader(session, request), d)
            with session.lock:
                return with_number(session, fn(self.reader(session, request), d), self.status)

        # Gradio passes the request by the annotation (resolved in this module) and logs the
        # handler by its name
        handler.__name__ = handler.__qualname__ = getattr(fn, "__name__", "handler")
        handler.__doc__ = fn.__doc__
        return handler

