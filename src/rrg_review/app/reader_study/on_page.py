"""A reading open on the review page: the review service's calls that the page's `Desk` makes
for the open study, answered by that reading through `ReadingDesk` instead.

Why an adapter and not a second page: the review screen's guarantees (no lost edit, one
handler of a tab at a time, conflicts with another tab's save, Keep mine / Take theirs, the
activity rule of active time) are the Desk's, and a reading must keep every one of them. The
Desk keeps doing what it does and asks this object instead of `ReviewService` while a reading
is open, so saves, heartbeats and ratings go to the reading (`reading_id` on the revisions and
ratings, `reading_section` timing, `reading.active_seconds`) and nothing is stored in the
reader's plain review of the same case.

A refusal of the reading layer (signed, not the reader's, its session closed) becomes a
`ReviewError`, which the Desk shows as one sentence with the reader's text left on screen.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from rrg_review.app.reader_study.reading import ReadingDesk, ReadingEdit, ReadingKeys
from rrg_review.app.reader_study.service import ReaderStudyError, ReadingSigned
from rrg_review.app.review.service import (
    EditConflict,
    RatingView,
    ReadOnlyNow,
    ReviewError,
    RevisionView,
    SectionEdit,
)

log = logging.getLogger(__name__)


@contextmanager
def _refusal() -> Iterator[None]:
    try:
        yield
    except ReadingSigned as exc:
        raise ReadOnlyNow(str(exc)) from None
    except ReaderStudyError as exc:
        raise ReviewError(str(exc)) from None


class ReadingReview:
    """`ReviewService`'s calls of the Desk, for one reading of one login. The reader and study
    ids the Desk passes are its own view of the tab; the reading decides (the server checks
    the login, the session and the washout on every call).

    Args:
        readings: the reading layer.
        reading_id: the reading open in the tab.
        login: the tab's reader.
        counts: section -> (keystroke events, edit operations) typed since the last save of
            that section (the page's counts, made relative by the Desk).
    """

    def __init__(self, readings: ReadingDesk, reading_id: int, login: str,
                 counts: Mapping[str, tuple[int, int]] | None = None) -> None:
        self.readings, self.reading_id, self.login = readings, reading_id, login
        self.counts = dict(counts or {})

    def current(self, reader_id: int, study_id: int) -> dict[str, RevisionView]:
        with _refusal():
            return self.readings.current(self.reading_id, self.login)

    def latest_rating(self, reader_id: int, study_id: int) -> RatingView | None:
        with _refusal():
            return self.readings.latest_rating(self.reading_id, self.login)

    def save_sections(self, reader_id: int, study_id: int, edits: dict[str, SectionEdit],
                      autosave: bool = False, address: str | None = None
                      ) -> dict[str, RevisionView | EditConflict]:
        out = {}
        for section, edit in edits.items():
            keys = None
            if edit.timing is not None:
                pressed, changed = self.counts.get(section, (0, 0))
                keys = ReadingKeys(edit.timing.first, edit.timing.last, pressed, changed)
            out[section] = ReadingEdit(edit.text, edit.base, keys)
        with _refusal():
            return self.readings.save(self.reading_id, self.login, out, autosave=autosave,
                                      address=address)

    def set_aside(self, reader_id: int, study_id: int, mine: dict[str, tuple[str, int]],
                  address: str | None = None) -> dict[str, RevisionView | EditConflict]:
        with _refusal():
            return self.readings.set_aside(self.reading_id, self.login, mine, address)

    def heartbeat(self, reader_id: int, study_id: int, seconds_since_last: float) -> float:
        with _refusal():
            return self.readings.heartbeat(self.reading_id, self.login, seconds_since_last)

    def submitted(self, reader_id: int, study_id: int, sections: Sequence[str]) -> None:
        """An explicit Save of text an autosave stored: `reading_section` has no column for
        the time of the last explicit save (the plain review's `section_timing` has), so
        nothing is recorded; signing is the reading's explicit act."""

    def rate(self, reader_id: int, study_id: int, *, likert: object, acceptable: bool,
             errors: dict[str, dict[str, object]], comment: str | None, preset: str | None,
             address: str | None = None,
             suggested: dict[str, int] | None = None) -> RatingView:
        with _refusal():
            return self.readings.rate(self.reading_id, self.login, likert=likert,
                                      acceptable=acceptable, errors=errors, comment=comment,
                                      address=address, suggested=suggested)
