"""Reader worklists at dataset scale (ReXGradient-160K): paging, search, filters, progress.

Every question a handler asks is one indexed query: a page of rows (LIMIT/OFFSET on the
(reader, position) index), the count behind it, progress per status (a counter table kept by
triggers, migration 0007), the next unfinished study after a position, the distinct sources.
Nothing here loads a whole worklist, so the cost of a click does not grow with the list.

Order: a worklist is read in `position` order. Assignment numbers new studies in natural key
order within each source (CXR1, CXR2, ..., CXR10, CXR100; see db/sorting.py), so the position
order is the natural order; studies assigned later follow the earlier ones.

Report-only studies (imported without images, as references for scoring) are not put on a
reading worklist unless asked (`include_report_only`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import date
from typing import Any, TypeVarTuple, cast

from sqlalchemy import (
    CursorResult,
    DateTime,
    Float,
    Integer,
    String,
    and_,
    case,
    func,
    literal,
    or_,
    select,
    union,
)
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.sql import ColumnElement, CompoundSelect, Select

from rrg_review.db.engine import Database
from rrg_review.db.models import (
    Draft,
    Patient,
    Study,
    WorklistItem,
    WorklistProgress,
    table_of,
    utcnow,
)

_Ts = TypeVarTuple("_Ts")  # the column types of a Select passed through
log = logging.getLogger(__name__)

STATUSES = ("new", "drafted", "in_review", "done")
IMAGE_FILTERS = {"all": None, "with images": True, "report only": False}
_AFTER = "\U0010ffff"  # sorts after every character: key < text + _AFTER bounds a prefix
MAX_PAGE_SIZE = 500
MAX_SEARCH_LENGTH = 128
_DRIVE_FROM_MATCHES = 5000  # up to this many search matches are sorted rather than walked
_ASSIGN_CHUNK = 500  # explicit study ids per INSERT ... SELECT (SQLite's bound-parameter limit)


class WorklistError(ValueError):
    """A request the worklist cannot answer (unknown status, bad page size); says which."""


@dataclass(frozen=True)
class WorklistFilter:
    """What the reader narrowed the list to. None (or '' for search) means no restriction.

    left_off: studies the list leaves out whatever the reader chose (the cases of their
    unfinished blinded reader studies: app/reader_study/service.py `BlindedCases`), so that
    no page, Next/Previous or resume leads to a study that plain review refuses."""

    status: str | None = None
    source: str | None = None
    split: str | None = None
    has_images: bool | None = None
    search: str = ""
    left_off: frozenset[int] = field(default=frozenset())
    # the search matches anywhere in a key, not only at its start (`WorklistService.searched`:
    # where no key starts with what was typed)
    within: bool = False

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in STATUSES:
            raise WorklistError(f"unknown status {self.status!r} (one of {', '.join(STATUSES)})")
        if len(self.search or "") > MAX_SEARCH_LENGTH:
            raise WorklistError(f"search text is longer than {MAX_SEARCH_LENGTH} characters")

    @classmethod
    def from_ui(cls, status: str | None = "all", source: str | None = "all",
                split: str | None = "all", images: str | None = "all",
                search: str | None = "") -> WorklistFilter:
        """The filter from the panel's dropdowns ('all' = no restriction).

        Args:
            status, source, split: the dropdowns' values; "all", "" or None: no restriction.
            images: a key of IMAGE_FILTERS ("all", None or "" for no restriction).
            search: a study or patient key prefix; surrounding blanks are stripped.

        Returns:
            The filter.

        Raises:
            WorklistError: an unknown image filter or status, or a search over
                MAX_SEARCH_LENGTH characters.
        """
        def value(v: str | None) -> str | None:
            return None if v in (None, "", "all") else str(v)

        if (images or "all") not in IMAGE_FILTERS:
            raise WorklistError(f"unknown image filter {images!r} "
                                f"(one of {', '.join(IMAGE_FILTERS)})")
        return cls(value(status), value(source), value(split), IMAGE_FILTERS[images or "all"],
                   (search or "").strip())

    @property
    def needs_study(self) -> bool:
        return bool(self.source or self.split or self.has_images is not None or self.search)

    @property
    def narrowed(self) -> bool:
        """Whether the reader chose a restriction (`left_off` is not their choice)."""
        return replace(self, left_off=frozenset()) != WorklistFilter()


@dataclass(frozen=True)
class WorklistEntry:
    study_id: int
    position: int
    source: str
    study_key: str
    patient_key: str
    study_date: date | None
    split: str | None
    images: int
    status: str
    active_seconds: float


@dataclass(frozen=True)
class WorkItem:
    """One study on a reader's worklist, as `WorklistService.items` lists them."""

    study_id: int
    position: int
    status: str
    source: str
    study_key: str
    active_seconds: float


@dataclass(frozen=True)
class WorklistPage:
    """One page of a filtered worklist. `page` is 1-based and always within 1..pages."""

    rows: tuple[WorklistEntry, ...]
    page: int
    pages: int
    page_size: int
    total: int  # rows matching the filter
    filter: WorklistFilter

    @property
    def first(self) -> int:
        """1-based number of the first row shown (0 when the page is empty)."""
        return (self.page - 1) * self.page_size + 1 if self.rows else 0

    @property
    def last(self) -> int:
        return self.first + len(self.rows) - 1 if self.rows else 0


@dataclass(frozen=True)
class Progress:
    new: int = 0
    drafted: int = 0
    in_review: int = 0
    done: int = 0

    @property
    def total(self) -> int:
        return self.new + self.drafted + self.in_review + self.done

    @property
    def unfinished(self) -> int:
        return self.total - self.done


def escape_like(text: str) -> str:
    """A LIKE pattern that matches `text` literally (% _ and \\ escaped with \\).

    Args:
        text: what the user typed.

    Returns:
        The escaped text, for a LIKE with ESCAPE '\\' (add any wildcards after escaping).
    """
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _prefix_ranges(column: InstrumentedAttribute[str], text: str) -> ColumnElement[bool]:
    """`column` starts with `text`, as index range scans: the text as typed, upper- and
    lower-case (keys are usually one case). Range comparisons, not LIKE: % _ ' and \\ in the
    search are ordinary characters, and the plain index on the key serves the query."""
    variants = dict.fromkeys((text, text.upper(), text.lower()))
    return or_(*[and_(column >= v, column < v + _AFTER) for v in variants])


def _search_ids(text: str, within: bool = False) -> CompoundSelect[int] | Select[int]:
    """Ids of studies whose study key, or whose patient's key, starts with `text` (index
    range scans); with `within`, whose study key contains it, in any case (a scan of the
    study keys: see `WorklistService.searched`)."""
    if within:
        return select(Study.id).where(
            Study.study_key.ilike(f"%{escape_like(text)}%", escape="\\"))
    by_study = select(Study.id).where(_prefix_ranges(Study.study_key, text))
    by_patient = (select(Study.id).join(Patient, Patient.id == Study.patient_id)
                  .where(_prefix_ranges(Patient.key, text)))
    return union(by_study, by_patient)


def _seek(skip: int, held: Sequence[int]) -> int:
    """The position of the row `skip` (0-based) of a list with positions 0..n-1 when the
    studies at the `held` positions (ascending) are left off: each one at or before it
    pushes it one further."""
    start = skip
    for position in held:
        if position > start:
            break
        start += 1
    return start


class WorklistService:
    def __init__(self, db: Database, include_report_only: bool = False) -> None:
        """Args:
            db: the database.
            include_report_only: `serve --include-report-only`: new readers also get the
                studies without images (report-only references).
        """
        self.db = db
        self.include_report_only = include_report_only

    # -- assignment -----------------------------------------------------------------------
    def assign(self, reader_id: int, study_ids: Sequence[int] | None = None, *,
               include_report_only: bool | None = None) -> int:
        """Put studies on a reader's worklist (default: every stored study with images);
        returns how many were new. One INSERT ... SELECT: 160,000 studies take about a second,
        not a minute of ORM objects. Studies already there keep their place and status.
        A read-only database (`--read-only`) keeps the worklists it has.

        Args:
            reader_id: whose worklist.
            study_ids: the studies to add (duplicates and unknown ids are ignored); None:
                every stored study.
            include_report_only: add studies without images too; None: the setting given at
                construction.

        Returns:
            How many were newly added (0 on a read-only database); they go after the
            reader's last position, in (source, sort key, id) order.
        """
        if self.db.read_only:
            return 0
        if include_report_only is None:
            include_report_only = self.include_report_only
        with self.db.write() as s:
            start = int(s.scalar(select(func.coalesce(func.max(WorklistItem.position), -1))
                                 .where(WorklistItem.reader_id == reader_id)) or 0) + 1
            if study_ids is None:
                return self._insert(s, reader_id, start, None, include_report_only)
            added, ids = 0, sorted({int(i) for i in study_ids})
            for chunk_start in range(0, len(ids), _ASSIGN_CHUNK):
                chunk = ids[chunk_start:chunk_start + _ASSIGN_CHUNK]
                added += self._insert(s, reader_id, start + added, chunk, include_report_only)
            return added

    def extend_every_worklist(self) -> tuple[int, int]:
        """Every stored study not yet on a non-empty worklist goes at its end (after an
        import: see `rrg-review import`). Returns (readers, study places added)."""
        with self.db.read() as s:
            readers = list(s.scalars(select(WorklistItem.reader_id).distinct()))
        return len(readers), sum(self.assign(reader) for reader in readers)

    @staticmethod
    def _insert(s: Session, reader_id: int, start: int, ids: Sequence[int] | None,
                include_report_only: bool) -> int:
        on_list = select(WorklistItem.id).where(WorklistItem.reader_id == reader_id,
                                                WorklistItem.study_id == Study.id).exists()
        order = func.row_number().over(order_by=(Study.source, Study.sort_key, Study.id))
        # drafts belong to the study, not to a reader: a reader who joins after pre-drafting
        # sees those studies as drafted, like the readers before (a new-user trial found
        # them "new" with the draft in the boxes, hidden from a "drafted" filter)
        has_draft = select(Draft.id).where(Draft.study_id == Study.id,
                                           Draft.error.is_(None)).exists()
        status = case((has_draft, literal("drafted", String)), else_=literal("new", String))
        chosen = select(
            literal(reader_id, Integer), Study.id, (order + (start - 1)).label("position"),
            status, literal(0.0, Float), literal(utcnow(), DateTime(timezone=True)),
        ).where(~on_list)
        if ids is not None:
            chosen = chosen.where(Study.id.in_(ids))
        if not include_report_only:
            chosen = chosen.where(Study.image_count > 0)
        stmt = table_of(WorklistItem).insert().from_select(
            ["reader_id", "study_id", "position", "status", "active_seconds", "updated_at"],
            chosen)
        # SQLAlchemy keeps an INSERT's rowcount only when asked (else -1 on PostgreSQL)
        # an INSERT's result is a CursorResult (rowcount), typed as the general Result
        done = cast("CursorResult[Any]", s.execute(stmt.execution_options(preserve_rowcount=True)))
        return int(done.rowcount or 0)

    def items(self, reader_id: int, status: str | None = None,
              source: str | None = None) -> list[WorkItem]:
        """The whole worklist (small lists, tests and exports only: handlers page with
        `page`, which never loads the whole list).

        Args:
            reader_id: whose worklist.
            status: only items with this status ("new", "in_review", "done"...); None or "": all.
            source: only studies from this import source; None or "": all.

        Returns:
            The items in worklist order (empty for a reader with no worklist).
        """
        stmt = (select(WorklistItem, Study.source, Study.study_key)
                .join(Study, Study.id == WorklistItem.study_id)
                .where(WorklistItem.reader_id == reader_id).order_by(WorklistItem.position))
        if status:
            stmt = stmt.where(WorklistItem.status == status)
        if source:
            stmt = stmt.where(Study.source == source)
        with self.db.read() as s:
            return [WorkItem(w.study_id, w.position, w.status, src, key, w.active_seconds)
                    for w, src, key in s.execute(stmt)]

    def report_only_count(self) -> int:
        """How many stored studies have no images (references, left off reading worklists
        unless asked): an empty worklist says so, or a new user thinks the import failed."""
        with self.db.read() as s:
            return int(s.scalar(select(func.count()).select_from(Study)
                                .where(Study.image_count == 0)) or 0)

    def has_worklist(self, reader_id: int) -> bool:
        """Args:
            reader_id: the reader.

        Returns:
            Whether the reader has at least one study on their worklist.
        """
        with self.db.read() as s:
            return s.scalar(select(WorklistItem.id).where(
                WorklistItem.reader_id == reader_id).limit(1)) is not None

    # -- reading --------------------------------------------------------------------------
    def _filtered(self, stmt: Select[*_Ts], reader_id: int, flt: WorklistFilter,
                  joined: bool = False) -> Select[*_Ts]:
        stmt = stmt.where(WorklistItem.reader_id == reader_id)
        if flt.status:
            stmt = stmt.where(WorklistItem.status == flt.status)
        if flt.left_off:
            stmt = stmt.where(WorklistItem.study_id.not_in(sorted(flt.left_off)))
        if not flt.needs_study:
            return stmt
        if not joined:
            stmt = stmt.join(Study, Study.id == WorklistItem.study_id)
        if flt.source:
            stmt = stmt.where(Study.source == flt.source)
        if flt.split:
            stmt = stmt.where(Study.split == flt.split)
        if flt.has_images is not None:
            stmt = stmt.where(Study.image_count > 0 if flt.has_images else Study.image_count == 0)
        if flt.search:
            stmt = stmt.where(WorklistItem.study_id.in_(_search_ids(flt.search, flt.within)))
        return stmt

    def searched(self, reader_id: int, flt: WorklistFilter) -> WorklistFilter:
        """The filter a reader's search means: the study or patient keys on their list (under
        their other filters) that start with what was typed, else, where none does, the study
        keys that contain it (a reader who typed the end of a key, "0414267" of "s50414267",
        found nothing: a new-user trial). Patient keys are not searched within: stored
        pseudonymised (`anon-` and hex digits), any few digits or letters are in thousands of
        them. One probe of the list; the scan of study keys only when it finds nothing.
        (Cases held off the list count as found: the list then says why they are not shown,
        `WorklistPanelLogic.held_matches`.)"""
        if not flt.search or flt.within:
            return flt
        probe = self._filtered(select(WorklistItem.study_id), reader_id,
                               replace(flt, left_off=frozenset())).limit(1)
        with self.db.read() as s:
            starts = s.scalar(probe)
        return flt if starts is not None else replace(flt, within=True)

    def page(self, reader_id: int, flt: WorklistFilter | None = None, page: int = 1,
             page_size: int = 50, progress: Progress | None = None) -> WorklistPage:
        """One page of the reader's worklist. A page past the end shows the last page, a page
        below 1 the first: a stale page number after a filter change never shows nothing.
        With the reader's `progress` at hand, an unfiltered or status-only page takes its
        total from it instead of counting again.

        Args:
            reader_id: whose worklist.
            flt: the filter; None: the whole list.
            page: the 1-based page asked for (clamped to 1..pages).
            page_size: rows per page, 1..MAX_PAGE_SIZE.
            progress: the reader's current `progress(reader_id)`, if the caller has it.

        Returns:
            The page's rows in list order, with the page actually shown, the page count
            (at least 1, even for an empty list) and the filtered total.

        Raises:
            WorklistError: a page size outside 1..MAX_PAGE_SIZE.
        """
        flt = flt or WorklistFilter()
        if not 1 <= int(page_size) <= MAX_PAGE_SIZE:
            raise WorklistError(f"page size must be 1-{MAX_PAGE_SIZE}, not {page_size}")
        page_size = int(page_size)
        with self.db.read() as s:
            held = self._held_positions(s, reader_id, flt)
            if progress is not None and not flt.needs_study:
                total = getattr(progress, flt.status) if flt.status else progress.total
                total -= len(held)
            else:
                total = int(s.scalar(self._filtered(select(func.count(WorklistItem.id)),
                                                    reader_id, flt)) or 0)
            pages = max(1, -(-total // page_size))
            page = min(max(1, int(page)), pages)
            # the page's ids first (a covering index scan when no study column is filtered),
            # then the joins for those rows only: OFFSET never joins the rows it skips
            # a narrow search: drive from its few studies (the reader/study index) and sort
            # them, instead of walking the reader's whole list in position order; a broad one
            # ("CXR1": 64,000 matches) fills a page within the first rows of that walk
            narrow = flt.search and total <= _DRIVE_FROM_MATCHES
            order = WorklistItem.position + 0 if narrow else WorklistItem.position
            ids = self._filtered(select(WorklistItem.id), reader_id, flt).order_by(order)
            skip = (page - 1) * page_size
            if skip and not (flt.status or flt.needs_study) \
                    and self._dense(s, reader_id, total + len(held)):
                # positions 0..n-1 without holes: page k starts at position k*size (past the
                # studies left off before it), an index seek instead of stepping over `skip`
                # entries
                ids = ids.where(WorklistItem.position >= _seek(skip, held)).limit(page_size)
            else:
                ids = ids.limit(page_size).offset(skip)
            stmt = (select(WorklistItem.study_id, WorklistItem.position, Study.source,
                           Study.study_key, Patient.key, Study.study_date, Study.split,
                           Study.image_count, WorklistItem.status, WorklistItem.active_seconds)
                    .join(Study, Study.id == WorklistItem.study_id)
                    .join(Patient, Patient.id == Study.patient_id)
                    .where(WorklistItem.id.in_(ids)).order_by(WorklistItem.position))
            rows = tuple(WorklistEntry(*tuple(row)) for row in s.execute(stmt))
        return WorklistPage(rows, page, pages, page_size, total, flt)

    @staticmethod
    def _held_positions(s: Session, reader_id: int, flt: WorklistFilter) -> list[int]:
        """Where the studies left off stand on the list (with the filter's status), in order:
        the counter table's total less these is the page's total, and a page's first
        position steps over them, instead of counting or walking the whole list again."""
        if not flt.left_off:
            return []
        stmt = select(WorklistItem.position).where(
            WorklistItem.reader_id == reader_id,
            WorklistItem.study_id.in_(sorted(flt.left_off)))
        if flt.status:
            stmt = stmt.where(WorklistItem.status == flt.status)
        # sorted here: ORDER BY position would walk the (reader, position) index over the
        # whole list instead of looking the few studies up on the (reader, study) one
        return sorted(s.scalars(stmt))

    @staticmethod
    def _dense(s: Session, reader_id: int, total: int) -> bool:
        """True when the reader's positions are exactly 0..total-1 (no study removed)."""
        top = s.scalar(select(func.max(WorklistItem.position)).where(
            WorklistItem.reader_id == reader_id))
        return top is not None and int(top) == total - 1

    def page_of(self, reader_id: int, study_id: int, flt: WorklistFilter | None = None,
                page_size: int = 50) -> int | None:
        """The page (1-based) that shows a study under a filter, or None if it is not shown.

        Args:
            reader_id: whose worklist.
            study_id: the study to find.
            flt: the filter; None: the whole list.
            page_size: rows per page (below 1 counts as 1).

        Returns:
            The page number, or None when the study is not on the list or the filter hides it.
        """
        flt = flt or WorklistFilter()
        with self.db.read() as s:
            position = self._position(s, reader_id, study_id)
            if position is None:
                return None
            shown = s.scalar(self._filtered(select(WorklistItem.id), reader_id, flt)
                             .where(WorklistItem.study_id == study_id))
            if shown is None:
                return None
            # the rows before it, less the studies left off among them (looked up by study:
            # NOT IN on every row before it cost 3x the count on 160,000 rows)
            counted = select(func.count(WorklistItem.id))
            plain = replace(flt, left_off=frozenset())
            before = int(s.scalar(self._filtered(counted, reader_id, plain)
                                  .where(WorklistItem.position < position)) or 0)
            if flt.left_off:
                before -= int(s.scalar(self._filtered(counted, reader_id, plain).where(
                    WorklistItem.study_id.in_(sorted(flt.left_off)),
                    WorklistItem.position + 0 < position)) or 0)
        return before // max(1, int(page_size)) + 1

    def progress(self, reader_id: int) -> Progress:
        """Counts per status: the reader's (at most four) `worklist_progress` rows, which
        database triggers keep in the same transaction as every status change (migration
        0007), so the cost does not grow with the worklist (a GROUP BY over 160,000 entries
        cost about 6x the 1,000-study page).

        Args:
            reader_id: the reader.

        Returns:
            The counts per status (all 0 for a reader with no worklist).
        """
        with self.db.read() as s:
            counts = dict(s.execute(select(WorklistProgress.status, WorklistProgress.count)
                                    .where(WorklistProgress.reader_id == reader_id)).all())
        return Progress(**{k: int(counts.get(k, 0)) for k in STATUSES})

    def progress_of(self, reader_id: int, study_ids: frozenset[int]) -> Progress:
        """Counts per status of these studies on the reader's worklist (the cases a filter's
        `left_off` keeps off the list: a few hundred at most, one indexed query).

        Args:
            reader_id: the reader.
            study_ids: the studies.

        Returns:
            Their counts per status (all 0 for none).
        """
        if not study_ids:
            return Progress()
        with self.db.read() as s:
            counts = dict(s.execute(select(WorklistItem.status, func.count(WorklistItem.id))
                                    .where(WorklistItem.reader_id == reader_id,
                                           WorklistItem.study_id.in_(sorted(study_ids)))
                                    .group_by(WorklistItem.status)).all())
        return Progress(**{k: int(counts.get(k, 0)) for k in STATUSES})

    def counted_progress(self, reader_id: int) -> Progress:
        """The same counts by a GROUP BY over the worklist (what the triggers must agree with;
        for checks and tests, not for handlers).

        Args:
            reader_id: the reader.

        Returns:
            The counts per status, counted from the worklist rows.
        """
        with self.db.read() as s:
            counts = dict(s.execute(select(WorklistItem.status, func.count(WorklistItem.id))
                                    .where(WorklistItem.reader_id == reader_id)
                                    .group_by(WorklistItem.status)).all())
        return Progress(**{k: int(counts.get(k, 0)) for k in STATUSES})

    def sources(self) -> tuple[str, ...]:
        """Every source in the database (SELECT DISTINCT on the source index).

        Returns:
            The source names, sorted (empty for an empty database).
        """
        with self.db.read() as s:
            return tuple(s.scalars(select(Study.source).distinct().order_by(Study.source)))

    def splits(self) -> tuple[str, ...]:
        """The dataset splits the studies carry, for the split dropdown.

        Returns:
            The split names, sorted; studies without a split are not counted.
        """
        with self.db.read() as s:
            return tuple(s.scalars(select(Study.split).where(Study.split.is_not(None))
                                   .distinct().order_by(Study.split)))

    def status_of(self, reader_id: int, study_id: int) -> str | None:
        """Args:
            reader_id: the reader.
            study_id: the study.

        Returns:
            The study's status on the reader's list, or None when it is not on it.
        """
        with self.db.read() as s:
            return s.scalar(select(WorklistItem.status).where(
                WorklistItem.reader_id == reader_id, WorklistItem.study_id == study_id))

    # -- moving through the list ----------------------------------------------------------
    @staticmethod
    def _position(s: Session, reader_id: int, study_id: int | None) -> int | None:
        if study_id is None:
            return None
        return s.scalar(select(WorklistItem.position).where(
            WorklistItem.reader_id == reader_id, WorklistItem.study_id == study_id))

    def positions(self, reader_id: int, study_ids: Sequence[int]) -> dict[int, int]:
        """Where each of these studies stands on the reader's list (absent ones left out).

        Args:
            reader_id: the reader.
            study_ids: the studies asked about.

        Returns:
            study id -> position (0-based order on the list).
        """
        with self.db.read() as s:
            return dict(s.execute(select(WorklistItem.study_id, WorklistItem.position).where(
                WorklistItem.reader_id == reader_id,
                WorklistItem.study_id.in_(list(study_ids)))).all())

    def next_unfinished(self, reader_id: int, after: int | None = None, step: int = 1,
                        flt: WorklistFilter | None = None, *, wrap: bool = False) -> int | None:
        """The next (step=1) or previous (step=-1) study not done (done, under the status
        filter "done") after/before `after`, in list order and within the filter. `after`
        not on the list: the first such study.
        None when there is none in that direction; with `wrap`, the search then goes round
        from the other end of the list (a reader at the last row still has the unfinished
        studies above it), never returning `after` itself.

        Under the status filter "done" the done studies are stepped through instead: a reader
        going over what they finished (Next had left the filtered list for an unfinished study
        not on it: a new-user trial).
        When `after` is None or not on the list, step=1 gives the first such study and
        step=-1 the last one.

        Args:
            reader_id: whose worklist.
            after: the study on screen, or None.
            step: 1 (or more) for next, a negative number for previous.
            flt: the filter; None: the whole list.
            wrap: go round from the other end when nothing is found in that direction.

        Returns:
            A study id, or None.
        """
        found = self._next_unfinished(reader_id, after, step, flt)
        if found is None and wrap and after is not None:
            found = self._next_unfinished(reader_id, None, step, flt, exclude=after)
        return found

    def _next_unfinished(self, reader_id: int, after: int | None, step: int,
                         flt: WorklistFilter | None, exclude: int | None = None) -> int | None:
        flt = flt or WorklistFilter()
        with self.db.read() as s:
            here = self._position(s, reader_id, after)
            stmt = self._filtered(select(WorklistItem.study_id), reader_id, flt)
            if flt.status != "done":
                stmt = stmt.where(WorklistItem.status != "done")
            if exclude is not None:
                stmt = stmt.where(WorklistItem.study_id != exclude)
            if here is None:
                stmt = stmt.order_by(WorklistItem.position if step >= 0
                                     else WorklistItem.position.desc())
            elif step >= 0:
                stmt = stmt.where(WorklistItem.position > here).order_by(WorklistItem.position)
            else:
                stmt = stmt.where(WorklistItem.position < here).order_by(
                    WorklistItem.position.desc())
            return s.scalar(stmt.limit(1))

    def undrafted(self, reader_id: int, after: int | None, count: int) -> list[int]:
        """The next `count` studies with no draft yet (status "new") after `after`, then
        round from the list's start (what pre-drafting works on). Studies imported while the
        app runs go at the list's end, and a reader may open any of them first: those above
        the open one are reached too (only the next unfinished studies after it were
        drafted, and a new-user trial found the ones above it never drafted); drafted
        studies take no place, so a run of drafted ones hides none.

        Args:
            reader_id: whose worklist.
            after: the study on screen (never returned); None or not on the list: from the
                list's start.
            count: how many at most (0 or less: none).

        Returns:
            Study ids, those after `after` in list order, then those before it.
        """
        if count <= 0:
            return []
        with self.db.read() as s:
            here = self._position(s, reader_id, after)
            stmt = select(WorklistItem.study_id).where(
                WorklistItem.reader_id == reader_id, WorklistItem.status == "new"
            ).order_by(WorklistItem.position).limit(count)
            if here is None:
                return list(s.scalars(stmt))
            ahead = list(s.scalars(stmt.where(WorklistItem.position > here)))
            if len(ahead) < count:
                ahead += s.scalars(stmt.where(WorklistItem.position < here)
                                   .limit(count - len(ahead)))
            return ahead

    def resume(self, reader_id: int,
               left_off: frozenset[int] = frozenset()) -> int | None:
        """The study to reopen after a reload: the last one worked on, else the first open.

        Args:
            reader_id: whose worklist.
            left_off: studies not to reopen (WorklistFilter.left_off).

        Returns:
            The most recently updated study "in_review", else the first study not done, else
            None (an empty or finished worklist).
        """
        with self.db.read() as s:
            flt = WorklistFilter(status="in_review", left_off=left_off)
            last = s.scalar(self._filtered(select(WorklistItem.study_id), reader_id, flt)
                            .order_by(WorklistItem.updated_at.desc(), WorklistItem.id.desc())
                            .limit(1))
        return last if last is not None else self.next_unfinished(
            reader_id, flt=WorklistFilter(left_off=left_off))
