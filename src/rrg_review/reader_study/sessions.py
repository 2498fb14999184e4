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

    def words(self, wait: timedelta) -> str:
        """Where the reader stands, as the admin panel and the command line both say it:
        "finished: every session signed", "session 2 open", or "session 2 opens
        2026-11-16 10:00 UTC (11 d 2 h left)" (`wait`: the time left, `wait(now)`)."""
        if self.finished:
            return "finished: every session signed"
        if self.open_session is not None:
            return f"session {self.open_session} open"
        when = f"{self.opens_at:%Y-%m-%d %H:%M} UTC" if self.opens_at is not None else "later"
        return f"session {self.next_session} opens {when} ({describe_wait(wait)} left)"


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
    """A washout's time left as a coordinator plans with it and a reader reads it: "3 d 4 h",
    "5 h 12 min", "12 min" (whole units, rounded down; "under 1 min" at the very end)."""
    minutes = int(max(wait.total_seconds(), 0) // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min" if minutes else "under 1 min"
