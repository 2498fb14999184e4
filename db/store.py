"""The queries and writes that the services share. Callers own the transaction (Database.write)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from db.models import Image, Meta, Patient, ReferenceReport, Study
from db.sorting import natural_key
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


def add_study(session: Session, record: StudyRecord, images: Sequence[StoredImage]) -> Study:
    """Insert one study with its patient (found or created), images and reference report."""
    patient = session.scalar(
        select(Patient).where(Patient.source == record.source, Patient.key == record.patient_key)
    )
    if patient is None:
        patient = Patient(source=record.source, key=record.patient_key)
        session.add(patient)
    study = Study(
        patient=patient,
        source=record.source,
        study_key=record.study_key,
        sort_key=natural_key(record.study_key),
        image_count=len(images),
        study_date=record.study_date,
        split=record.split,
        indication=record.indication,
        comparison=record.comparison,
        demographics=dict(record.demographics),
    )
    for position, stored in enumerate(images):
        info = stored.info
        study.images.append(Image(
            position=position,
            uri=stored.uri,
            format=info.format,
            view_position=info.view_position,
            view_group=view_group(info.view_position),
            laterality=info.laterality,
            body_part=info.body_part,
            rows=info.rows,
            cols=info.cols,
            photometric=info.photometric,
            bits_stored=info.bits_stored,
            checksum=info.checksum,
        ))
    if record.reference is not None:
        study.reference = ReferenceReport(
            findings=record.reference.findings, impression=record.reference.impression
        )
    session.add(study)
    session.flush()
    return study


def get_study(session: Session, study_id: int) -> Study | None:
    """A study with its images, reference and patient loaded."""
    return session.scalar(
        select(Study)
        .where(Study.id == study_id)
        .options(selectinload(Study.images), selectinload(Study.reference),
                 selectinload(Study.patient))
    )


def priors(session: Session, study: Study) -> list[Study]:
    """The same patient's earlier studies, most recent first (one query on the patient index)."""
    if study.study_date is None:
        return []
    return list(session.scalars(
        select(Study)
        .where(Study.patient_id == study.patient_id, Study.study_date < study.study_date)
        .order_by(Study.study_date.desc(), Study.id.desc())
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
