"""When a reader's next session opens: after the washout since they ended the one before.

The washout is per reader: a reader's session N+1 opens when that reader has signed every
reading of session N and `washout_days` have passed since their last signature of it. What the
washout protects against is a reader remembering a case they read before, and that memory runs
from their own reading, not from when the slowest colleague finished; so a fast reader is not
held up by a slow one. Session 1 is open from the start.

The time is always passed in (`now`), never read here: the server decides with its clock, and
tests decide with theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta


@dataclass(frozen=True)
class SessionProgress:
    """One reader's readings of one session: how many, how many signed, the last signature."""

    session: int
    total: int
    signed: int
    last_signed_at: datetime | None

    @property
    def ended(self) -> bool:
        return self.signed >= self.total


@dataclass(frozen=True)
class ReaderSchedule:
    """Where a reader stands: the session open to them now (None: none is), or the next one
    and when it opens; `finished` once every session is signed."""

    open_session: int | None
    next_session: int | None
    opens_at: datetime | None
    finished: bool

    def wait(self, now: datetime) -> timedelta:
        """Time left to the washout's end (zero when a session is open or none is coming)."""
        if self.opens_at is None or self.open_session is not None:
            return timedelta(0)
        return max(self.opens_at - now, timedelta(0))


def schedule(progress: Sequence[SessionProgress], washout: timedelta,
             now: datetime) -> ReaderSchedule:
    """The reader's session state at `now`.

    Args:
        progress: the reader's sessions, in order from session 1 (a session with no readings
            counts as ended when the one before it did).
        washout: the study's washout between two sessions.
        now: the current time (timezone-aware).
    """
    ended_at: datetime | None = None
    for i, session in enumerate(progress):
        if session.ended:
            ended_at = session.last_signed_at or ended_at
            continue
        if i == 0 or ended_at is None:
            return ReaderSchedule(session.session, None, None, finished=False)
        opens_at = ended_at + washout
        if now >= opens_at:
            return ReaderSchedule(session.session, None, opens_at, finished=False)
        return ReaderSchedule(None, session.session, opens_at, finished=False)
    return ReaderSchedule(None, None, None, finished=True)


def describe_wait(wait: timedelta) -> str:
    """A wait as people say it: "3.0 days", "5.5 hours", "12 minutes"."""
    seconds = wait.total_seconds()
    if seconds >= 48 * 3600:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{max(seconds, 0) / 60:.0f} minutes"
