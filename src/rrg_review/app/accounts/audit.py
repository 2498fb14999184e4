"""The audit trail: who did what, when and from where (logins, failed logins, saves, ratings,
exports), one append-only row per event in the `audit_event` table, also written to the log.

One call: `AuditLog(db).record("save", actor="alice", target="study 3 findings", address=ip)`.
Inside an open write transaction pass `session=` so the event commits (or rolls back) with the
change it describes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from rrg_review.db.engine import ROWS, Database
from rrg_review.db.models import AuditEvent, utcnow

log = logging.getLogger(__name__)

ACTIONS = ("login", "login_failed", "login_throttled", "logout", "session_expired", "save",
           "rate", "accept", "take_theirs", "export", "export_refused", "unload_model",
           "tab_refused", "study_create", "study_unblind", "reading_open", "reading_sign")


@dataclass(frozen=True)
class AuditEntry:
    at: datetime
    actor: str | None
    action: str
    target: str | None
    address: str | None
    ok: bool
    detail: str | None


class AuditLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    def record(self, action: str, *, actor: str | None = None, target: str | None = None,
               address: str | None = None, ok: bool = True, detail: str | None = None,
               session: Session | None = None) -> None:
        """Write one event (in `session`'s transaction when given, else in its own).

        Every event is also logged (a failure as a warning); on a read-only database without
        a `session` that log line is the only trace.

        Args:
            action: one of ACTIONS.
            actor: the account name (cut to 64 characters), if known.
            target: what was acted on, e.g. "study 12 findings revision 3" (cut to 255).
            address: the client's address (cut to 64), if known.
            ok: False for a refused or failed attempt.
            detail: free text, e.g. why an export was narrowed.
            session: the transaction of the work recorded, so both are stored or neither.

        Raises:
            ValueError: an unknown action.
        """
        if action not in ACTIONS:
            raise ValueError(f"unknown audit action {action!r}")
        level = logging.INFO if ok else logging.WARNING
        log.log(level, "audit %s actor=%s target=%s from=%s ok=%s %s", action, actor, target,
                address, ok, detail or "")
        event = AuditEvent(at=utcnow(), actor=(actor or "")[:64] or None, action=action,
                           target=(target or "")[:255] or None,
                           address=(address or "")[:64] or None, ok=ok, detail=detail)
        if session is not None:
            session.add(event)
            return
        if self.db.read_only:
            return  # a read-only database cannot keep the trail; the log line above has it
        with self.db.write(scope=ROWS) as s:  # an append: nothing to serialise
            s.add(event)

    def recent(self, limit: int = 100, *, actor: str | None = None,
               action: str | None = None) -> list[AuditEntry]:
        """The latest events, for an admin to read who did what.

        Args:
            limit: how many at most.
            actor: only this account's events; None: anyone's.
            action: only this action; None: any.

        Returns:
            The events, newest first.
        """
        stmt = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
        if actor is not None:
            stmt = stmt.where(AuditEvent.actor == actor)
        if action is not None:
            stmt = stmt.where(AuditEvent.action == action)
        with self.db.read() as s:
            return [AuditEntry(e.at, e.actor, e.action, e.target, e.address, e.ok, e.detail)
                    for e in s.scalars(stmt)]
