"""The worklist panel (the workstation's left column): search, filters, one page of rows, page
controls, Previous/Next unfinished study and the reader's progress.

Every event asks WorklistService one page or one count, so the panel behaves the same with 50
studies or 160,000. The workstation builds it with one call and hands it its "open study"
function:

    with gr.Column():
        panel = build_worklist_panel(WorklistService(db))
    ...  # the rest of the layout, then:
    panel.connect(ui, state, reader_of, open_study, open_outputs, prepare_reader=...)

`open_study(session, study_id, request)` returns the workstation's outputs for opening a study
(a list in the order of `open_outputs`, or a {component: value} dict). After save/rate/accept,
`panel.follow(event)` refreshes the rows and the progress line in a follow-up event, so the save
itself never waits for a count.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import gradio as gr

from rrg_review.app.worklist.service import (
    IMAGE_FILTERS,
    STATUSES,
    Progress,
    WorklistError,
    WorklistFilter,
    WorklistPage,
    WorklistService,
)

log = logging.getLogger(__name__)

PAGE_SIZE = 50
# few columns, so that the list is readable in the left column of a 1366 px screen: source,
# split and images are filters above the table (a study without images says so in its status
# cell), and the patient (a long pseudonym) is above the film and searchable; ids (6 digits at
# 160,000 studies) and keys ("CXR15995/1") fit on one line at 1366 px, the status wraps; a
# pseudonymous key ("anon-" + 16 hex digits, 21 characters) takes two lines in the study column
# (it was cut off at "anon-44e5c0a047…" with 40 %: three lines), titled whole by page.js
COLUMNS = ["id", "study", "status", "min"]
COLUMN_WIDTHS: list[str | int] = ["18%", "47%", "21%", "14%"]
LAST_PAGE = 1 << 30  # clamped to the last page by the service
LOADING = "*Loading worklist…*"
# after a search: the ids of the rows found (the table's first column) to the page script
# (an empty search box is no search: Enter in it opened a worklist's only study: a trial)
# the rows found, or the one whose whole study key is the text (any case): a new-user trial
# typed "CXR1" and waited, and the search had found CXR1, CXR10 ... CXR199 (the key itself is
# first of them in the list's natural order)
SEARCHED_JS = ("(search, table) => { const text = String(search || '').trim().toLowerCase();"
               " if (!window.rrgSearched || !text) return;"
               " const rows = Array.isArray(table) ? table : ((table && table.data) || []);"
               " const exact = rows.filter((r) => String(r[1]).trim().toLowerCase() === text);"
               " window.rrgSearched((exact.length === 1 ? exact : rows)"
               ".map((r) => Number(r[0])).filter(Number.isInteger)); }")


@dataclass(frozen=True)
class PanelView:
    """What the panel shows for one request (plain values, so it is testable without Gradio)."""

    rows: list[list[Any]]
    page: int
    label: str
    progress: str | None  # None: unchanged (not recounted for a search or a column filter)
    message: str


def progress_line(p: Progress, held: Progress | None = None) -> str:
    """Done of all, then what is left with the part of it begun ("4 in review · 4 to go" read
    as eight studies to a new-user trial: the studies in review are among those to go).
    `held`: the studies the list leaves off (cases of the reader's unfinished blinded reader
    study), counted apart: "1 / 4 done · 3 to go" above an empty list misled a trial."""
    tail = ""
    if held is not None and held.total:
        p = Progress(**{k: getattr(p, k) - getattr(held, k) for k in STATUSES})
        tail = f" · {held.total:,} in your blinded reader study (its study worklist)"
    if not p.total:
        return f"**No studies on your worklist.**{tail}"
    return (f"**{p.done:,} / {p.total:,} done** · {p.unfinished:,} to go "
            f"({p.in_review:,} in review){tail}")


def table_rows(page: WorklistPage) -> list[list[Any]]:
    return [[r.study_id, r.study_key,
             r.status.replace("_", " ") + ("" if r.images else " · report only, no images"),
             round(r.active_seconds / 60, 1)] for r in page.rows]


def page_label(page: WorklistPage) -> str:
    if not page.total:
        return "No study matches." if page.filter.narrowed else ""
    return (f"{page.first:,}-{page.last:,} of {page.total:,} · page {page.page:,} / "
            f"{page.pages:,}")


def _nothing_left_off(reader: int) -> frozenset[int]:
    return frozenset()


class WorklistPanelLogic:
    """The panel's decisions, without Gradio: what a page shows, where Next/Previous go.

    `left_off(reader)` gives the studies the reader's list leaves out whatever the filters
    (the cases of their unfinished blinded reader studies, one query per event): every page,
    count and Next/Previous is taken without them."""

    def __init__(self, worklists: WorklistService, page_size: int = PAGE_SIZE,
                 left_off: Callable[[int], frozenset[int]] = _nothing_left_off) -> None:
        self.worklists = worklists
        self.page_size = page_size
        self.left_off = left_off

    def filter_of(self, reader: int, search: str | None, status: str | None,
                  source: str | None, split: str | None, images: str | None) -> WorklistFilter:
        flt = WorklistFilter.from_ui(status, source, split, images, search)
        return self.worklists.searched(reader, replace(flt, left_off=self.left_off(reader)))

    def view(self, reader: int, search: str | None = "", status: str | None = "all",
             source: str | None = "all", split: str | None = "all", images: str | None = "all",
             page: float | None = 1, with_progress: bool = True) -> PanelView:
        """A page of the filtered worklist; bad input gives a message, never a traceback.

        The progress counts are read when they cost nothing extra: for the whole list or a
        status filter they also give the page's total. A search or a column filter counts its
        own matches and leaves the progress line as it is."""
        try:
            flt = self.filter_of(reader, search, status, source, split, images)
            number = int(page) if page is not None and page == page else 1  # NaN -> 1
        except (WorklistError, ValueError, OverflowError) as exc:
            return PanelView([], 1, "", None, f"⚠ {html.escape(str(exc))}")
        counts = (self.worklists.progress(reader)
                  if with_progress and not flt.needs_study else None)
        result = self.worklists.page(reader, flt, number, self.page_size, counts)
        # (the text as typed, in a code span: nothing in it is taken as Markdown or HTML)
        within = (f"No key on your list starts with `{flt.search.replace('`', chr(39))}`: "
                  "the studies whose key contains it." if flt.within and result.total else "")
        return PanelView(table_rows(result), result.page,
                         self.held_matches(reader, flt, result.total) or page_label(result),
                         self.progress_text(reader, counts, flt.left_off)
                         if counts is not None else None, within)

    def held_matches(self, reader: int, flt: WorklistFilter, found: int) -> str:
        """Why a search found nothing when what it names is held off the list (cases of the
        reader's blinded reader study; "No study matches." alone read as a wrong key to a
        new-user trial); '' otherwise. `found`: what the search found on the list."""
        if found or not (flt.search and flt.left_off):
            return ""
        held = self.worklists.page(reader, replace(flt, left_off=frozenset()), 1, 1).total
        if not held:
            return ""
        return (f"No study on this list matches: {held:,} matching "
                f"{'study is a case' if held == 1 else 'studies are cases'} of your blinded "
                "reader study (read in its study worklist above).")

    def progress_text(self, reader: int, counts: Progress | None = None,
                      left_off: frozenset[int] | None = None) -> str:
        """The progress line: the reader's counts (read now unless given), the cases their
        blinded reader studies keep off the list (`left_off`: looked up unless given)
        counted apart."""
        counts = counts if counts is not None else self.worklists.progress(reader)
        left_off = left_off if left_off is not None else self.left_off(reader)
        return progress_line(counts, self.worklists.progress_of(reader, left_off)
                             if left_off else None)

    @staticmethod
    def stepped_through(status: str | None) -> str:
        """Which studies Next and Previous go through under this status filter: the done
        ones under "done", else the unfinished ones."""
        return "done" if status == "done" else "unfinished"

    def target(self, reader: int, current: int | None, step: int, search: str | None = "",
               status: str | None = "all", source: str | None = "all",
               split: str | None = "all", images: str | None = "all") -> int | None:
        """The next/previous unfinished study within the filters, or the next/previous done
        one under the status filter "done" (None: none that way)."""
        try:
            flt = self.filter_of(reader, search, status, source, split, images)
        except WorklistError:
            flt = WorklistFilter(left_off=self.left_off(reader))
        return self.worklists.next_unfinished(reader, current, step, flt, wrap=True)

    def wrapped(self, reader: int, current: int, target: int, step: int) -> bool:
        """Whether going `step` from `current` went round the end of the list to `target`."""
        order = self.worklists.positions(reader, (current, target))
        if len(order) < 2:
            return False
        return (order[target] < order[current]) if step > 0 else (order[target] > order[current])

    def searched(self, reader: int, current: int | None, search: str | None = "",
                 status: str | None = "all", source: str | None = "all",
                 split: str | None = "all", images: str | None = "all") -> PanelView:
        """What Enter in the search box shows: the first page of what was found, or, with the
        box empty (a search cleared), the page holding the open study `current` (a new-user
        trial cleared a search and was sent to page 1, the open study 7 pages away)."""
        if current is not None and not (search or "").strip():
            shown = self.page_showing(reader, current, search, status, source, split, images)
            if shown is not None:
                return shown
        return self.view(reader, search, status, source, split, images)

    def page_showing(self, reader: int, study_id: int, search: str | None = "",
                     status: str | None = "all", source: str | None = "all",
                     split: str | None = "all", images: str | None = "all") -> PanelView | None:
        """The page on which a study appears under the filters (None: it is filtered out)."""
        try:
            flt = self.filter_of(reader, search, status, source, split, images)
        except WorklistError:
            return None
        number = self.worklists.page_of(reader, study_id, flt, self.page_size)
        if number is None:
            return None
        return self.view(reader, search, status, source, split, images, number,
                         with_progress=False)


def _shown_ids(table: Any) -> set[int]:
    """Study ids in the table value Gradio hands back (a DataFrame, or a list of rows)."""
    try:
        if hasattr(table, "iloc"):
            return {int(v) for v in table.iloc[:, 0].tolist() if str(v).strip()}
        return {int(row[0]) for row in table or [] if row and str(row[0]).strip()}
    except (TypeError, ValueError, IndexError):
        return set()


@dataclass
class WorklistPanel:
    logic: WorklistPanelLogic
    search: gr.Textbox
    status: gr.Dropdown
    source: gr.Dropdown
    split: gr.Dropdown
    images: gr.Dropdown
    table: gr.Dataframe
    page: gr.Number
    first_page: gr.Button
    previous_page: gr.Button
    next_page: gr.Button
    last_page: gr.Button
    page_text: gr.Markdown
    previous_study: gr.Button
    next_study: gr.Button
    progress: gr.Markdown
    message: gr.Markdown
    _refresh: Callable[..., Any] | None = None

    @property
    def filters(self) -> list[gr.components.Component]:
        return [self.search, self.status, self.source, self.split, self.images]

    @property
    def view_outputs(self) -> list[gr.components.Component]:
        return [self.table, self.page, self.page_text, self.progress, self.message]

    def follow(self, event: Any) -> Any:
        """After an event that changes statuses (save, rate, accept): refresh the rows and the
        progress in a follow-up request. Returns the chained event."""
        if self._refresh is None:
            raise RuntimeError("connect() the panel before following events")
        return event.then(self._refresh, [*self.filters, self.page], self.view_outputs,
                          show_progress="hidden", queue=False)

    def connect(self, blocks: gr.Blocks, state: gr.State,
                reader_of: Callable[[gr.Request | None], int],
                open_study: Callable[..., Any] | None,
                open_outputs: Sequence[gr.components.Component],
                current_of: Callable[[Any], int | None] = lambda s: getattr(s, "study", None),
                prepare_reader: Callable[[int], Any] | None = None,
                navigation: bool = True) -> None:
        """Wire the panel: load, filters, search, paging, row click and Previous/Next.

        `prepare_reader(reader)` runs on page load before the first page is read (e.g. give a
        new reader a worklist); it must be idempotent, as the workstation's own load may run it
        at the same time. With `navigation=False` the row click and Previous/Next are left to
        the caller (the workstation saves the reader's pending text before it leaves a study,
        which needs the edit boxes as inputs); `logic.target` and `page_showing` serve it."""
        views = _Views(self, reader_of, prepare_reader)
        self._refresh = views.refresh_all
        filters, paging, view_outputs = self.filters, [*self.filters, self.page], self.view_outputs
        # reads only: off Gradio's queue (no waiting behind other events; SQLite in WAL mode
        # serves concurrent reads)
        light: dict[str, Any] = {"show_progress": "hidden", "queue": False}
        blocks.load(views.on_load, paging, [self.source, self.split, *view_outputs], **light)
        searched = self.search.submit(views.searched(current_of), [state, *filters],
                                      view_outputs, api_name="worklist_search", **light)
        # the workstation's page script opens a study found alone (`rrgSearched`, page.js;
        # a browser-only step, no request); the panel's own page has no such script. Only
        # after a search that answered: a failed one leaves the rows it did not replace
        searched.success(None, [self.search, self.table], None, js=SEARCHED_JS, queue=False,
                         show_progress="hidden", api_visibility="private")
        for dropdown in (self.status, self.source, self.split, self.images):
            dropdown.input(views.first, filters, view_outputs, **light)
        self.page.submit(views.paged(0), paging, view_outputs, **light)
        self.first_page.click(views.first, filters, view_outputs, **light)
        self.previous_page.click(views.paged(-1), paging, view_outputs, **light)
        self.next_page.click(views.paged(1), paging, view_outputs, api_name="worklist_page",
                             **light)
        self.last_page.click(views.paged(None), paging, view_outputs, **light)
        if not navigation:
            return
        if open_study is None:
            raise ValueError("the panel's own navigation needs an open_study function")
        steps = _Steps(self, reader_of, open_study, list(open_outputs), current_of)
        step_outputs = list(dict.fromkeys([*open_outputs, self.table, self.page,
                                           self.page_text, self.message]))
        self.table.select(steps.on_select, [state],
                          list(dict.fromkeys([*open_outputs, self.message])))
        self.next_study.click(steps.stepper(1), [state, *filters, self.table], step_outputs,
                              api_name="next_study")
        self.previous_study.click(steps.stepper(-1), [state, *filters, self.table],
                                  step_outputs, api_name="previous_study")


class _Views:
    """The panel's read-only events: a page of the filtered list and the progress line."""

    def __init__(self, panel: WorklistPanel, reader_of: Callable[[gr.Request | None], int],
                 prepare_reader: Callable[[int], Any] | None) -> None:
        self.logic, self.reader_of, self.prepare_reader = panel.logic, reader_of, prepare_reader

    @staticmethod
    def as_view(v: PanelView) -> list[Any]:
        progress = gr.update() if v.progress is None else v.progress
        return [v.rows, v.page, v.label, progress, v.message]

    def refresh(self, search: str | None, status: str | None, source: str | None,
                split: str | None, images: str | None, page: float | None,
                request: gr.Request) -> list[Any]:
        return self.as_view(self.logic.view(self.reader_of(request), search, status, source,
                                            split, images, page))

    def refresh_all(self, search: str | None, status: str | None, source: str | None,
                    split: str | None, images: str | None,
                    page: float | None, request: gr.Request) -> list[Any]:
        """After a status change: the rows, and the progress line whatever the filter."""
        reader = self.reader_of(request)
        v = self.logic.view(reader, search, status, source, split, images, page)
        out = self.as_view(v)
        if v.progress is None:
            out[3] = self.logic.progress_text(reader)
        return out

    def on_load(self, search: str | None, status: str | None, source: str | None,
                split: str | None, images: str | None, page: float | None,
                request: gr.Request) -> list[Any]:
        if self.prepare_reader is not None:
            self.prepare_reader(self.reader_of(request))
        choices = ["all", *self.logic.worklists.sources()]
        splits = ["all", *self.logic.worklists.splits()]
        return [gr.update(choices=choices), gr.update(choices=splits),
                *self.refresh_all(search, status, source, split, images, page, request)]

    def first(self, search: str | None, status: str | None, source: str | None,
              split: str | None, images: str | None,
              request: gr.Request) -> list[Any]:
        return self.refresh(search, status, source, split, images, 1, request)

    def searched(self, current_of: Callable[[Any], int | None]) -> Callable[..., Any]:
        """Enter in the search box (`WorklistPanelLogic.searched`): the tab's open study is
        read from its state (`current_of`), not locked: a read-only event."""
        def handler(state: Any, search: str | None, status: str | None, source: str | None,
                    split: str | None, images: str | None, request: gr.Request) -> list[Any]:
            return self.as_view(self.logic.searched(self.reader_of(request), current_of(state),
                                                    search, status, source, split, images))
        return handler

    def paged(self, delta: int | None) -> Callable[..., Any]:
        def handler(search: str | None, status: str | None, source: str | None,
                    split: str | None, images: str | None,
                    page: float | None, request: gr.Request) -> list[Any]:
            try:
                number = LAST_PAGE if delta is None else int(page or 1) + delta
            except (TypeError, ValueError, OverflowError):  # NaN, inf: back to the start
                number = 1
            return self.refresh(search, status, source, split, images, number, request)
        return handler


class _Steps:
    """The panel's own navigation (when the caller leaves it to the panel): the row click and
    Previous/Next open a study through the caller's `open_study`."""

    def __init__(self, panel: WorklistPanel, reader_of: Callable[[gr.Request | None], int],
                 open_study: Callable[..., Any], outputs: list[gr.components.Component],
                 current_of: Callable[[Any], int | None]) -> None:
        self.panel, self.logic, self.reader_of = panel, panel.logic, reader_of
        self.open_study, self.outputs, self.current_of = open_study, outputs, current_of

    def opened(self, session: object, study_id: int | None,
               request: gr.Request) -> dict[Any, Any]:
        result = self.open_study(session, study_id, request)
        if isinstance(result, dict):
            return dict(result)
        return dict(zip(self.outputs, result, strict=True))

    def on_select(self, session: object, evt: gr.SelectData,
                  request: gr.Request) -> dict[Any, Any]:
        value: Any = evt.row_value[0] if evt.row_value else None  # from the browser
        try:
            study_id = int(value)
        except (TypeError, ValueError):
            return {self.panel.message: "Select a row with a study."}
        out = self.opened(session, study_id, request)
        out[self.panel.message] = ""
        return out

    def stepper(self, step: int) -> Callable[..., Any]:
        def handler(session: object, search: str | None, status: str | None, source: str | None,
                    split: str | None, images: str | None,
                    table: object, request: gr.Request) -> dict[Any, Any]:
            return self.step(step, session, (search, status, source, split, images), table,
                             request)
        return handler

    def step(self, step: int, session: object,
             filters: tuple[str | None, str | None, str | None, str | None, str | None],
             table: object, request: gr.Request) -> dict[Any, Any]:
        panel, logic = self.panel, self.logic
        reader, current = self.reader_of(request), self.current_of(session)
        target = logic.target(reader, current, step, *filters)
        kind = logic.stepped_through(filters[1])
        if target is None:
            where = "after" if step > 0 else "before"
            return {panel.message: f"No {kind} study {where} this one"
                    + (" under these filters." if current is not None else ".")}
        out = self.opened(session, target, request)
        wrapped = current is not None and logic.wrapped(reader, current, target, step)
        out[panel.message] = ("Wrapped round to the " + ("first" if step > 0 else "last")
                              + f" {kind} study of the list." if wrapped else "")
        if target not in _shown_ids(table):  # follow the study to its page
            v = logic.page_showing(reader, target, *filters)
            if v is not None:
                out.update({panel.table: v.rows, panel.page: v.page, panel.page_text: v.label})
        return out


def build_worklist_panel(worklists: WorklistService, page_size: int = PAGE_SIZE,
                         left_off: Callable[[int], frozenset[int]] = _nothing_left_off
                         ) -> WorklistPanel:
    """Lay the panel out in the current Gradio context (call inside the left column);
    `left_off`: see WorklistPanelLogic."""
    logic = WorklistPanelLogic(worklists, page_size, left_off)
    sources = ["all", *worklists.sources()]
    splits = ["all", *worklists.splits()]
    with gr.Group(elem_id="worklist-panel"):
        # true while the first load runs; "No studies" only once a count says so
        progress = gr.Markdown(LOADING, elem_id="progress")
        # (whole at 1366 px: "..., Enter to search" was cut off there, a new-user trial)
        # (its label is not shown, but names the box for a screen reader: it was "Textbox")
        search = gr.Textbox(placeholder="Study or patient key, then Enter",
                            label="Search the worklist", show_label=False,
                            elem_id="worklist-search", max_lines=1, max_length=128)
        with gr.Row():
            # the rows say "in review": so does the filter (its value stays the status)
            status = gr.Dropdown([("all", "all"), *((s.replace("_", " "), s) for s in STATUSES)],
                                 value="all", label="Status",
                                 elem_id="status-filter", min_width=90)
            source = gr.Dropdown(sources, value="all", label="Source", elem_id="source-filter",
                                 min_width=90)
        with gr.Row():
            split = gr.Dropdown(splits, value="all", label="Split", elem_id="split-filter",
                                min_width=90)
            images = gr.Dropdown(list(IMAGE_FILTERS), value="all", label="Images",
                                 elem_id="images-filter", min_width=90)
        # above the rows: what a search or Next found is read where the rows are (below them,
        # at 1366x768 a new-user trial never saw "No key on your list starts with ...")
        message = gr.Markdown(elem_id="worklist-message")
        table = gr.Dataframe(headers=COLUMNS, interactive=False, label="Worklist",
                             elem_id="worklist", max_height=520, wrap=True,
                             column_widths=COLUMN_WIDTHS)
        with gr.Row():
            first_page = gr.Button("«", size="sm", elem_id="worklist-first", min_width=32)
            previous_page = gr.Button("‹", size="sm", elem_id="worklist-prev-page",
                                      min_width=32)
            page = gr.Number(value=1, precision=0, label="Worklist page", show_label=False,
                             elem_id="worklist-page", min_width=72)
            next_page = gr.Button("›", size="sm", elem_id="worklist-next-page", min_width=32)
            last_page = gr.Button("»", size="sm", elem_id="worklist-last", min_width=32)
        page_text = gr.Markdown(elem_id="worklist-page-label")
        with gr.Row():
            previous_study = gr.Button("◀ Previous", elem_id="prev-study", size="sm")
            next_study = gr.Button("Next ▶", elem_id="next-study", size="sm")
    return WorklistPanel(logic, search, status, source, split, images, table, page, first_page,
                         previous_page, next_page, last_page, page_text, previous_study,
                         next_study, progress, message)
