"""The queries and writes that the services share. Callers own the transaction (Database.write)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import and_, func, insert, or_, select
from sqlalchemy.orm import Session, selectinload

from db.models import (
    Image,
    Meta,
    Patient,
    ReferenceReport,
    ReferenceReportVersion,
    Study,
    utcnow,
)
from studies.pixels import ImageInfo
from studies.records import StudyRecord, view_group

_SALT_KEY = "pseudonym_salt"


def pseudonym(session: Session, identifier: str) -> str:
    """A stable pseudonym for an identifier that may be PHI (HMAC with this database's salt)."""
    salt = session.get(Meta, _SALT_KEY)
    if salt is None:
        salt = Meta(key=_SALT_KEY, value=secrets.token_hex(32))
        session.add(salt)
        session.flush()
    digest = hmac.new(bytes.fromhex(salt.value), identifier.encode(), hashlib.sha256)
    return "anon-" + digest.hexdigest()[:16]


def find_study(session: Session, source: str, study_key: str) -> Study | None:
    return session.scalar(select(Study).where(Study.source == source, Study.study_key == study_key))


@dataclass(frozen=True)
class StoredImage:
    uri: str
    info: ImageInfo


@dataclass(frozen=True)
class KnownStudy:
    """A stored study as the importer needs it: its id and the fingerprint of its last import."""

    id: int
    patient_id: int
    fingerprint: str | None


def known_studies(session: Session) -> dict[tuple[str, str], KnownStudy]:
    """Every stored study by (source, study key): one query, so a re-import of 160,000 studies
    checks each one with a dict look-up instead of a query."""
    rows = session.execute(select(Study.source, Study.study_key, Study.id, Study.patient_id,
                                  Study.fingerprint))
    return {(src, key): KnownStudy(i, pid, fp) for src, key, i, pid, fp in rows}


def known_patients(session: Session) -> dict[tuple[str, str], int]:
    return {(src, key): i for src, key, i in
            session.execute(select(Patient.source, Patient.key, Patient.id))}


def _next_id(session: Session, table) -> int:
    return int(session.scalar(select(func.coalesce(func.max(table.c.id), 0))) or 0) + 1


def _image_row(study_id: int, position: int, stored: StoredImage) -> dict:
    info = stored.info
    return dict(
        study_id=study_id, position=position, uri=stored.uri, format=info.format,
        view_position=info.view_position, view_group=view_group(info.view_position),
        view_source=info.view_source if info.view_position else None,
        laterality=info.laterality, body_part=info.body_part, rows=info.rows, cols=info.cols,
        photometric=info.photometric, bits_stored=info.bits_stored, checksum=info.checksum,
    )


def insert_studies(
    session: Session,
    items: Sequence[tuple[StudyRecord, Sequence[StoredImage], str | None]],
    patients: dict[tuple[str, str], int],
) -> list[int]:
    """Insert new studies (record, images, fingerprint) with a few executemany statements.

    Keys must be final (pseudonymised by the caller). Ids are allocated here, inside the
    caller's write transaction (which holds SQLite's write lock), so a batch of thousands costs
    five statements instead of five per study. `patients` is updated with created patients.
    """
    if not items:
        return []
    now = utcnow()
    patient_table, study_table = Patient.__table__, Study.__table__
    image_table, ref_table = Image.__table__, ReferenceReport.__table__
    new_patients: list[dict] = []
    next_patient = None
    for record, _, _ in items:
        pkey = (record.source, record.patient_key)
        if pkey not in patients:
            if next_patient is None:
                next_patient = _next_id(session, patient_table)
            patients[pkey] = next_patient
            new_patients.append(dict(id=next_patient, source=record.source,
                                     key=record.patient_key))
            next_patient += 1
    if new_patients:
        session.execute(insert(patient_table), new_patients)
    study_id = _next_id(session, study_table)
    studies, images, refs, ids = [], [], [], []
    for record, stored, fingerprint in items:
        ids.append(study_id)
        studies.append(dict(
            id=study_id, patient_id=patients[(record.source, record.patient_key)],
            source=record.source, study_key=record.study_key, study_date=record.study_date,
            study_time=record.study_time, split=record.split, split_raw=record.split_raw,
            indication=record.indication, comparison=record.comparison,
            demographics=dict(record.demographics), created_at=now, fingerprint=fingerprint,
        ))
        images.extend(_image_row(study_id, pos, im) for pos, im in enumerate(stored))
        if record.reference is not None:
            refs.append(dict(study_id=study_id, findings=record.reference.findings,
                             impression=record.reference.impression, version=1))
        study_id += 1
    session.execute(insert(study_table), studies)
    if images:
        session.execute(insert(image_table), images)
    if refs:
        session.execute(insert(ref_table), refs)
    return ids


_MERGED_FIELDS = ("study_date", "study_time", "split", "split_raw", "indication", "comparison")


def merge_study(
    session: Session, study_id: int, record: StudyRecord, new_images: Sequence[StoredImage],
    fingerprint: str | None,
) -> list[str]:
    """Bring a stored study up to a re-imported record; returns what changed (empty: nothing).

    New images are appended; a reference whose sections changed becomes a new version (the old
    text is kept in reference_report_version); study fields the record now has are filled or
    updated, never erased (a record that lacks a value leaves the stored one).
    """
    study = session.get(Study, study_id, options=[selectinload(Study.images),
                                                 selectinload(Study.reference)])
    if study is None:
        raise LookupError(f"study {study_id} vanished during the import")
    changes: list[str] = []
    for name in _MERGED_FIELDS:
        value = getattr(record, name)
        if value is not None and getattr(study, name) != value:
            setattr(study, name, value)
            changes.append(name)
    demographics = {**(study.demographics or {}), **record.demographics}
    if demographics != (study.demographics or {}):
        study.demographics = demographics
        changes.append("demographics")
    if new_images:
        position = max((im.position for im in study.images), default=-1) + 1
        session.execute(insert(Image.__table__), [
            _image_row(study.id, position + i, im) for i, im in enumerate(new_images)])
        changes.append(f"{len(new_images)} image(s)")
    new_ref = record.reference
    old_ref = study.reference
    if new_ref is not None:
        if old_ref is None:
            study.reference = ReferenceReport(findings=new_ref.findings,
                                              impression=new_ref.impression, version=1)
            changes.append("reference")
        elif (old_ref.findings, old_ref.impression) != (new_ref.findings, new_ref.impression):
            session.add(ReferenceReportVersion(
                study_id=study.id, version=old_ref.version, findings=old_ref.findings,
                impression=old_ref.impression))
            old_ref.findings, old_ref.impression = new_ref.findings, new_ref.impression
            old_ref.version += 1
            changes.append(f"reference (version {old_ref.version})")
    study.fingerprint = fingerprint
    session.flush()
    return changes


def add_study(session: Session, record: StudyRecord, images: Sequence[StoredImage]) -> Study:
    """Insert one study with its patient (found or created), images and reference report."""
    patients = {}
    existing = session.scalar(
        select(Patient.id).where(Patient.source == record.source, Patient.key == record.patient_key)
    )
    if existing is not None:
        patients[(record.source, record.patient_key)] = existing
    (study_id,) = insert_studies(session, [(record, images, None)], patients)
    return session.get(Study, study_id)


def get_study(session: Session, study_id: int) -> Study | None:
    """A study with its images, reference and patient loaded."""
    return session.scalar(
        select(Study)
        .where(Study.id == study_id)
        .options(selectinload(Study.images), selectinload(Study.reference),
                 selectinload(Study.patient))
    )


def priors(session: Session, study: Study) -> list[Study]:
    """The same patient's earlier studies, most recent first (one query on the patient index).

    Same-day studies (portable ICU films) are priors of each other by study time when both
    have one.
    """
    if study.study_date is None:
        return []
    earlier = Study.study_date < study.study_date
    if study.study_time is not None:
        earlier = or_(earlier, and_(Study.study_date == study.study_date,
                                    Study.study_time.is_not(None),
                                    Study.study_time < study.study_time))
    return list(session.scalars(
        select(Study)
        .where(Study.patient_id == study.patient_id, earlier)
        .order_by(Study.study_date.desc(), Study.study_time.desc(), Study.id.desc())
        .options(selectinload(Study.images), selectinload(Study.reference))
    ))


@dataclass(frozen=True)
class StoreCounts:
    patients: int
    studies: int
    images: int
    references: int
    with_both_sections: int


def counts(session: Session, source: str | None = None) -> StoreCounts:
    def n(stmt) -> int:
        return int(session.scalar(stmt) or 0)

    study_q = select(func.count(Study.id))
    patient_q = select(func.count(Patient.id))
    image_q = select(func.count(Image.id)).join(Study)
    ref_q = select(func.count(ReferenceReport.id)).join(Study)
    if source is not None:
        study_q = study_q.where(Study.source == source)
        patient_q = patient_q.where(Patient.source == source)
        image_q = image_q.where(Study.source == source)
        ref_q = ref_q.where(Study.source == source)
    both = ref_q.where(
        func.coalesce(ReferenceReport.findings, "") != "",
        func.coalesce(ReferenceReport.impression, "") != "",
    )
    return StoreCounts(n(patient_q), n(study_q), n(image_q), n(ref_q), n(both))
