"""The typed ORM schema (SQLAlchemy 2.0). Alembic migrations in db/migrations mirror it exactly.

Append-only where a reader's work is concerned: every save of an edit is a new `Revision`, every
rating save a new `Rating` row; nothing a reader wrote is ever updated in place.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    Time,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON}  # noqa: RUF012 - SQLAlchemy's declared hook


class Meta(Base):
    """Key/value facts about this database (e.g. the pseudonymisation salt)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Patient(Base):
    __tablename__ = "patient"
    __table_args__ = (
        UniqueConstraint("source", "key", name="uq_patient_source_key"),
        Index("ix_patient_key", "key"),  # worklist search by patient key (prefix)
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    source: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(128))  # pseudonymous id as given, or hashed
    studies: Mapped[list[Study]] = relationship(back_populates="patient")


class Study(Base):
    __tablename__ = "study"
    __table_args__ = (
        UniqueConstraint("source", "study_key", name="uq_study_source_key"),
        Index("ix_study_patient_date", "patient_id", "study_date"),
        Index("ix_study_source_sort", "source", "sort_key", "id"),
        Index("ix_study_key", "study_key"),  # worklist search by study key (prefix)
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    patient_id: Mapped[int] = mapped_column(ForeignKey("patient.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(64), index=True)
    study_key: Mapped[str] = mapped_column(String(128))  # accession or dataset study id
    study_date: Mapped[date | None] = mapped_column(Date)
    study_time: Mapped[time | None] = mapped_column(Time)  # orders same-day studies (priors)
    split: Mapped[str | None] = mapped_column(String(32), index=True)  # train | valid | test
    split_raw: Mapped[str | None] = mapped_column(String(32))  # as the dataset wrote it
    # Digest of the imported record: an unchanged re-import is recognised without reading files.
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    indication: Mapped[str | None] = mapped_column(Text)
    comparison: Mapped[str | None] = mapped_column(Text)
    demographics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Denormalised for the worklist (one indexed query per page, see db/sorting.py): the natural
    # sort key of study_key, and how many images the study has (0: a report-only reference).
    sort_key: Mapped[str] = mapped_column(String(255), default="", server_default="")
    image_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    patient: Mapped[Patient] = relationship(back_populates="studies")
    images: Mapped[list[Image]] = relationship(
        back_populates="study", order_by="Image.position", cascade="all, delete-orphan"
    )
    reference: Mapped[ReferenceReport | None] = relationship(
        back_populates="study", cascade="all, delete-orphan"
    )


class Image(Base):
    __tablename__ = "image"
    __table_args__ = (UniqueConstraint("study_id", "position", name="uq_image_study_position"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    uri: Mapped[str] = mapped_column(Text)  # absolute path, or "blob:<sha256>.<ext>"
    format: Mapped[str] = mapped_column(String(8))
    view_position: Mapped[str | None] = mapped_column(String(32))
    view_group: Mapped[str | None] = mapped_column(String(8))  # frontal | lateral
    view_source: Mapped[str | None] = mapped_column(String(16))  # dicom | metadata | None
    laterality: Mapped[str | None] = mapped_column(String(8))
    body_part: Mapped[str | None] = mapped_column(String(32))
    rows: Mapped[int] = mapped_column(Integer)
    cols: Mapped[int] = mapped_column(Integer)
    photometric: Mapped[str] = mapped_column(String(16))
    bits_stored: Mapped[int] = mapped_column(Integer)
    checksum: Mapped[str] = mapped_column(String(64), index=True)

    study: Mapped[Study] = relationship(back_populates="images")


class ReferenceReport(Base):
    __tablename__ = "reference_report"

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(
        ForeignKey("study.id", ondelete="CASCADE"), unique=True
    )
    findings: Mapped[str | None] = mapped_column(Text)
    impression: Mapped[str | None] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")

    study: Mapped[Study] = relationship(back_populates="reference")


class ReferenceReportVersion(Base):
    """A superseded reference report: a re-import that changes a section keeps the old text here
    (metrics computed against it stay explainable)."""

    __tablename__ = "reference_report_version"
    __table_args__ = (
        UniqueConstraint("study_id", "version", name="uq_reference_version"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    findings: Mapped[str | None] = mapped_column(Text)
    impression: Mapped[str | None] = mapped_column(Text)
    replaced_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


ROLES = ("reader", "admin")


class Reader(Base):
    __tablename__ = "reader"
    __table_args__ = (CheckConstraint("role IN ('reader', 'admin')", name="ck_reader_role"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))  # None: the local reader
    # admin: may export every reader's work and unload the model; reader: only their own work
    role: Mapped[str] = mapped_column(String(16), default="reader", server_default="reader")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class AuditEvent(Base):
    """One security-relevant event: login, failed login, save, rating, export (append-only)."""

    __tablename__ = "audit_event"
    __table_args__ = (Index("ix_audit_event_at", "at"), Index("ix_audit_event_actor", "actor"))

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    actor: Mapped[str | None] = mapped_column(String(64))  # the account name as given
    action: Mapped[str] = mapped_column(String(32))
    target: Mapped[str | None] = mapped_column(String(255))  # e.g. "study 12 findings"
    address: Mapped[str | None] = mapped_column(String(64))  # client IP, or "cli"
    ok: Mapped[bool] = mapped_column(Boolean, default=True)
    detail: Mapped[str | None] = mapped_column(Text)


class WebSession(Base):
    """A signed-in browser. Only the SHA-256 of its cookie token is kept, so a copy of the
    database does not let anyone sign in; times are wall-clock seconds (UTC epoch), so idle
    and absolute expiry are checked the same way by every app process and after a restart."""

    __tablename__ = "web_session"
    __table_args__ = (Index("ix_web_session_reader", "reader_id"),)

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    reader_id: Mapped[int] = mapped_column(ForeignKey("reader.id", ondelete="CASCADE"))
    created_s: Mapped[float] = mapped_column(Float)
    seen_s: Mapped[float] = mapped_column(Float)


class LoginThrottleState(Base):
    """Failed logins of one key ("account:NAME" or "address:IP") and when the next attempt may
    be checked (wall-clock epoch seconds), so a restart does not reset the back-off."""

    __tablename__ = "login_throttle"
    __table_args__ = (Index("ix_login_throttle_last_failure", "last_failure_s"),)

    key: Mapped[str] = mapped_column(String(160), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)
    not_before_s: Mapped[float] = mapped_column(Float)
    last_failure_s: Mapped[float] = mapped_column(Float)


class Draft(Base):
    """One generated section of one study by one model; failures are kept with their error."""

    __tablename__ = "draft"
    __table_args__ = (
        Index("ix_draft_study_preset", "study_id", "preset", "section"),
        CheckConstraint("section IN ('findings', 'impression')", name="ck_draft_section"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"))
    section: Mapped[str] = mapped_column(String(16))
    preset: Mapped[str] = mapped_column(String(64))
    text: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    model_id: Mapped[str] = mapped_column(String(255))
    model_revision: Mapped[str | None] = mapped_column(String(64))
    generation: Mapped[dict[str, Any]] = mapped_column(default=dict)
    device: Mapped[str | None] = mapped_column(String(32))
    dtype: Mapped[str | None] = mapped_column(String(16))
    seconds: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Revision(Base):
    """One save of a reader's edit of a section; `number` counts saves (1, 2, ...) per section."""

    __tablename__ = "revision"
    __table_args__ = (
        UniqueConstraint("reader_id", "study_id", "section", "number", name="uq_revision_seq"),
        CheckConstraint("section IN ('findings', 'impression')", name="ck_revision_section"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    reader_id: Mapped[int] = mapped_column(ForeignKey("reader.id", ondelete="CASCADE"))
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"))
    section: Mapped[str] = mapped_column(String(16))
    number: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    draft_id: Mapped[int | None] = mapped_column(ForeignKey("draft.id", ondelete="SET NULL"))
    autosave: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # the reader-study reading this save belongs to; None: reading outside studies. Numbers
    # stay unique per reader, case and section across readings (one sequence), so a revision
    # number names one save; each reading's history is its own rows.
    reading_id: Mapped[int | None] = mapped_column(
        ForeignKey("reading.id", ondelete="CASCADE"), index=True)


class Rating(Base):
    """One save of a reader's rating of a study's drafts (Likert + ReXVal error counts)."""

    __tablename__ = "rating"
    __table_args__ = (
        UniqueConstraint("reader_id", "study_id", "number", name="uq_rating_seq"),
        CheckConstraint("likert IS NULL OR likert BETWEEN 1 AND 5", name="ck_rating_likert"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    reader_id: Mapped[int] = mapped_column(ForeignKey("reader.id", ondelete="CASCADE"))
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    preset: Mapped[str | None] = mapped_column(String(64))  # which model's drafts were rated
    likert: Mapped[int | None] = mapped_column(Integer)
    acceptable: Mapped[bool | None] = mapped_column(Boolean)
    # {"false_finding": {"significant": n, "insignificant": m}, ...}
    errors: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # the counts suggested from the reader's edit when they rated ({category: n}, issue #22);
    # None: no suggestion was made (before migration 0013, an accepted draft)
    suggested: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    comment: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # the reader-study reading rated; None: outside studies (numbers as for Revision)
    reading_id: Mapped[int | None] = mapped_column(
        ForeignKey("reading.id", ondelete="CASCADE"), index=True)


class WorklistItem(Base):
    """A study on a reader's worklist, its status and active time on task."""

    __tablename__ = "worklist_item"
    __table_args__ = (
        UniqueConstraint("reader_id", "study_id", name="uq_worklist_reader_study"),
        Index("ix_worklist_reader_position", "reader_id", "position"),
        Index("ix_worklist_reader_status", "reader_id", "status", "position"),
        CheckConstraint(
            "status IN ('new', 'drafted', 'in_review', 'done')", name="ck_worklist_status"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    reader_id: Mapped[int] = mapped_column(ForeignKey("reader.id", ondelete="CASCADE"))
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default="new")
    active_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # wall-clock end (epoch seconds) of the time already counted: a second tab or process
    # beating on the same study adds only what lies after it, so time is counted once a reader
    active_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow
    )


class WorklistProgress(Base):
    """How many of a reader's worklist entries have each status (the progress line), so it is
    read from four primary-key rows instead of counted over a 160,000-study worklist. Kept by
    database triggers on `worklist_item` in the same transaction as the change (migration
    0007 creates them; the ORM cannot declare triggers): never written by the application."""

    __tablename__ = "worklist_progress"
    # db/transfer.py: rebuilt, never copied (SQLAlchemy reads __table_args__ as a plain dict)
    __table_args__ = {"info": {"derived": True}}  # noqa: RUF012

    reader_id: Mapped[int] = mapped_column(
        ForeignKey("reader.id", ondelete="CASCADE"), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)


class SectionTiming(Base):
    """When a reader worked on one section of one study: first and last keystroke, the last
    explicit save (submit), and whether a model draft was on screen at the first keystroke, so
    "time with vs without a draft" means what the reader saw. One row per reader, study, section;
    the timestamps are updated as work goes on (they are measurements, not the reader's text)."""

    __tablename__ = "section_timing"
    __table_args__ = (
        UniqueConstraint("reader_id", "study_id", "section", name="uq_section_timing"),
        CheckConstraint("section IN ('findings', 'impression')", name="ck_section_timing_section"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    reader_id: Mapped[int] = mapped_column(ForeignKey("reader.id", ondelete="CASCADE"))
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"))
    section: Mapped[str] = mapped_column(String(16))
    first_keystroke_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_keystroke_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    submitted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    draft_on_screen: Mapped[bool | None] = mapped_column(Boolean)


class MetricResult(Base):
    """A cached metric payload: (metric, version, metric model, hypothesis, reference) -> the
    per-pair numbers the metric aggregates (a score, BLEU counts, CheXbert labels)."""

    __tablename__ = "metric_result"
    __table_args__ = (
        UniqueConstraint(
            "metric", "version", "model_id", "hyp_hash", "ref_hash", name="uq_metric_result_key"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    metric: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(64))
    model_id: Mapped[str] = mapped_column(String(255), default="")
    hyp_hash: Mapped[str] = mapped_column(String(64))
    ref_hash: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class MetricCorpus(Base):
    """A cached metric matrix for one exact ordered list of (hypothesis, reference) pairs."""

    __tablename__ = "metric_corpus"
    __table_args__ = (
        UniqueConstraint("metric", "version", "model_id", "digest", name="uq_metric_corpus_key"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    metric: Mapped[str] = mapped_column(String(64))
    version: Mapped[str] = mapped_column(String(64))
    model_id: Mapped[str] = mapped_column(String(255), default="")
    digest: Mapped[str] = mapped_column(String(64))
    matrix: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)



# -- controlled reader studies (issue #20; `study` above is an imaging study) --------------------
class ReaderStudy(Base):
    """A controlled reader study: its design file as given (text and hash, so what was run can
    be shown and checked) and what it means, and the balance table of its allocation. Its
    readings are made once, when it is created, in the same transaction."""

    __tablename__ = "reader_study"
    __table_args__ = (
        CheckConstraint("design IN ('parallel', 'crossover')", name="ck_reader_study_design"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    design: Mapped[str] = mapped_column(String(16))
    sessions: Mapped[int] = mapped_column(Integer)
    washout_days: Mapped[float] = mapped_column(Float)
    seed: Mapped[int] = mapped_column(BigInteger)
    blinded: Mapped[bool] = mapped_column(Boolean)
    design_text: Mapped[str] = mapped_column(Text)  # the file as given
    design_format: Mapped[str] = mapped_column(String(8))  # json | yaml
    design_sha256: Mapped[str] = mapped_column(String(64))  # of design_text
    # of the validated design (comments and key order aside): "the same study" on a re-create
    canonical_sha256: Mapped[str] = mapped_column(String(64))
    balance: Mapped[dict[str, Any]] = mapped_column()  # allocation.BalanceTable.to_json()
    created_by: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ReaderStudyArm(Base):
    """One arm of a reader study and its blinded code (the code -> arm map is the study's
    unblinding key)."""

    __tablename__ = "reader_study_arm"
    __table_args__ = (
        UniqueConstraint("reader_study_id", "code", name="uq_reader_study_arm_code"),
        UniqueConstraint("reader_study_id", "spec", name="uq_reader_study_arm_spec"),
        CheckConstraint("kind IN ('unassisted', 'draft', 'reference')",
                        name="ck_reader_study_arm_kind"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    reader_study_id: Mapped[int] = mapped_column(
        ForeignKey("reader_study.id", ondelete="CASCADE"))
    code: Mapped[str] = mapped_column(String(8))  # A, B, ... (seeded order)
    spec: Mapped[str] = mapped_column(String(80))  # unassisted | draft:<preset> | reference
    kind: Mapped[str] = mapped_column(String(16))
    preset: Mapped[str | None] = mapped_column(String(64))
    template: Mapped[str | None] = mapped_column(Text)


class ReaderStudyReader(Base):
    """A reader account taking part in a reader study."""

    __tablename__ = "reader_study_reader"

    reader_study_id: Mapped[int] = mapped_column(
        ForeignKey("reader_study.id", ondelete="CASCADE"), primary_key=True)
    reader_id: Mapped[int] = mapped_column(ForeignKey("reader.id", ondelete="CASCADE"),
                                           primary_key=True, index=True)
    position: Mapped[int] = mapped_column(Integer)  # as the design file lists them


class ReaderStudyCase(Base):
    """An imaging study that is a case of a reader study."""

    __tablename__ = "reader_study_case"

    reader_study_id: Mapped[int] = mapped_column(
        ForeignKey("reader_study.id", ondelete="CASCADE"), primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"),
                                          primary_key=True, index=True)
    position: Mapped[int] = mapped_column(Integer)  # source, key order


class Reading(Base):
    """One reading: a reader reads a case under an arm in a session, at a place in their
    session's order. Allocated when the study is created; `opened_at` and `signed_at` record
    its start and its signature (a reading once opened means the study has started: its design
    can no longer be replaced)."""

    __tablename__ = "reading"
    __table_args__ = (
        UniqueConstraint("reader_study_id", "reader_id", "study_id", "session",
                         name="uq_reading_case_session"),
        UniqueConstraint("reader_study_id", "reader_id", "session", "position",
                         name="uq_reading_order"),
        CheckConstraint("session >= 1 AND position >= 1", name="ck_reading_counts"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    reader_study_id: Mapped[int] = mapped_column(
        ForeignKey("reader_study.id", ondelete="CASCADE"))
    reader_id: Mapped[int] = mapped_column(ForeignKey("reader.id", ondelete="CASCADE"),
                                           index=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("study.id", ondelete="CASCADE"),
                                          index=True)
    arm_id: Mapped[int] = mapped_column(ForeignKey("reader_study_arm.id", ondelete="CASCADE"),
                                        index=True)
    session: Mapped[int] = mapped_column(Integer)
    position: Mapped[int] = mapped_column(Integer)
    opened_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    signed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # active seconds by the review screen's rule (heartbeats capped at 60 s, counted once
    # across tabs up to `active_until`, epoch seconds), for this reading alone
    active_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    active_until: Mapped[float | None] = mapped_column(Float)


class ReadingSection(Base):
    """Timing of one section of one reading: what was on screen when it opened (the draft of
    the reading's arm, if any: its id, never shown to the reader), first and last keystroke,
    and how many keystroke events and edit operations the page counted (counts only: no
    keystroke text is kept beyond the revisions). Its own table, not a `reading_id` on
    `section_timing`: that table's key (reader, case, section) is one row per case outside
    studies, and a NULL in a unique key would no longer keep it one."""

    __tablename__ = "reading_section"
    __table_args__ = (
        CheckConstraint("section IN ('findings', 'impression')",
                        name="ck_reading_section_section"),
        CheckConstraint("keystrokes >= 0 AND edits >= 0", name="ck_reading_section_counts"),
    )

    reading_id: Mapped[int] = mapped_column(ForeignKey("reading.id", ondelete="CASCADE"),
                                            primary_key=True)
    section: Mapped[str] = mapped_column(String(16), primary_key=True)
    draft_id: Mapped[int | None] = mapped_column(ForeignKey("draft.id", ondelete="SET NULL"))
    first_keystroke_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_keystroke_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    keystrokes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    edits: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


def table_of(model: type[Base]) -> Table:
    """A mapped class's Table (SQLAlchemy types `__table__` as the wider FromClause), for the
    Core INSERTs that write many rows at once."""
    table = model.__table__
    assert isinstance(table, Table)  # noqa: S101 - narrowing: every mapped class has one
    return table
