"""The queries and writes that the services share. Callers own the transaction (Database.write)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from db.engine import DatabaseProblem
from db.models import Image, Meta, Patient, ReferenceReport, Study
from studies.pixels import ImageInfo
from studies.records import StudyRecord, view_group

ENV_KEY = "RRG_REVIEW_KEY"  # 64 hex digits; overrides the key file
_LEGACY_SALT = "pseudonym_salt"  # versions before 0004 kept the key inside the database
_KEY_CHECK = "pseudonym_key_check"  # HMAC of a constant: tells a wrong key, reveals nothing
_PSEUDONYM_RE = re.compile(r"^anon-[0-9a-f]{16}$")
log = logging.getLogger(__name__)


class PseudonymKeyError(DatabaseProblem):
    """The pseudonym key is missing or does not belong to this database."""


def _check_value(key: bytes) -> str:
    return hmac.new(key, b"rrg-review pseudonym key check", hashlib.sha256).hexdigest()[:32]


def _read_key_file(path: Path) -> bytes:
    text = path.read_text(encoding="ascii").strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise PseudonymKeyError(f"{path} does not hold a hex key") from None
    if len(key) < 32:
        raise PseudonymKeyError(f"{path} holds a key shorter than 32 bytes")
    if path.stat().st_mode & 0o077:
        log.warning("%s is readable by other users; chmod 600 it", path)
    return key


def _write_key_file(path: Path, key: bytes) -> bytes:
    """Create the key file 0600 (never overwriting one another process wrote first)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return _read_key_file(path)
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(key.hex() + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    log.info("pseudonym key written to %s (back it up with the database)", path)
    return key


def pseudonym_key(session: Session) -> bytes:
    """The HMAC key for pseudonyms: $RRG_REVIEW_KEY, else the key file next to the database
    (`<db>.key`, 0600), created on first use. The database holds only a check value, so a copy
    of the database alone cannot be used to reverse a pseudonym by trying every MRN.

    A key that used to live in the database (before revision 0004) is moved out to the file.
    A database that already has pseudonyms but whose key is gone is refused rather than given
    a new key, which would silently split every patient in two.
    """
    db = session.info.get("database")
    if db is not None and db._key is not None:
        return db._key
    key_file: Path | None = getattr(db, "key_file", None)
    stored_check = session.get(Meta, _KEY_CHECK)
    legacy = session.get(Meta, _LEGACY_SALT)
    env = os.environ.get(ENV_KEY, "").strip()
    if env:
        try:
            key = bytes.fromhex(env)
        except ValueError:
            raise PseudonymKeyError(f"{ENV_KEY} is not a hex key") from None
        where = ENV_KEY
    elif key_file is not None and key_file.is_file():
        key, where = _read_key_file(key_file), str(key_file)
    elif key_file is None:
        raise PseudonymKeyError(f"set {ENV_KEY} (64 hex digits) for pseudonyms in {db.url}")
    elif legacy is not None:
        key, where = _write_key_file(key_file, bytes.fromhex(legacy.value)), str(key_file)
    elif stored_check is not None:
        raise PseudonymKeyError(
            f"the pseudonym key of this database is missing ({key_file}); restore it from "
            f"your backup or set {ENV_KEY}")
    else:
        key, where = _write_key_file(key_file, secrets.token_bytes(32)), str(key_file)
    if stored_check is not None and stored_check.value != _check_value(key):
        raise PseudonymKeyError(f"the pseudonym key in {where} does not belong to this "
                                "database; restore the right key file from your backup")
    if (stored_check is None or legacy is not None) and not getattr(db, "read_only", False):
        with session.no_autoflush:
            if stored_check is None:
                session.add(Meta(key=_KEY_CHECK, value=_check_value(key)))
            if legacy is not None:
                session.delete(legacy)
        session.flush()
    if db is not None:
        db._key = key
    return key


def pseudonym(session: Session, identifier: str) -> str:
    """A stable pseudonym for an identifier that may be PHI (HMAC with the key kept outside
    the database)."""
    digest = hmac.new(pseudonym_key(session), identifier.encode(), hashlib.sha256)
    return "anon-" + digest.hexdigest()[:16]


def opaque_study_id(key: bytes, source: str, study_key: str) -> str:
    """The id exports show instead of a dataset's study key (which may be a folder name
    carrying a patient's name or MRN): keyed, stable, not reversible without the key."""
    digest = hmac.new(key, f"study\0{source}\0{study_key}".encode(), hashlib.sha256)
    return "study-" + digest.hexdigest()[:12]


def pseudonymise_stored_patients(session: Session) -> int:
    """Replace patient keys stored as given (by versions before every key was pseudonymised)
    with their pseudonyms; a patient whose pseudonym already exists is merged into it.
    Returns how many patients changed. Cheap when there are none (one indexed query)."""
    raw = list(session.scalars(select(Patient).where(~Patient.key.like("anon-%"))))
    raw = [p for p in raw if not _PSEUDONYM_RE.match(p.key)]
    for patient in raw:
        key = pseudonym(session, patient.key)
        twin = session.scalar(select(Patient).where(Patient.source == patient.source,
                                                    Patient.key == key))
        if twin is None:
            patient.key = key
            continue
        for study in list(patient.studies):
            study.patient = twin
        session.flush()
        session.delete(patient)
    session.flush()
    return len(raw)


def find_study(session: Session, source: str, study_key: str) -> Study | None:
    return session.scalar(select(Study).where(Study.source == source, Study.study_key == study_key))


@dataclass(frozen=True)
class StoredImage:
    uri: str
    info: ImageInfo


def add_study(session: Session, record: StudyRecord, images: Sequence[StoredImage]) -> Study:
    """Insert one study with its patient (found or created), images and reference report.

    Every patient identifier, whatever importer it came from (DICOM PatientID, a dataset's
    subject id, `report.json`'s patient_id, a folder name), is stored as a keyed pseudonym;
    one this store already made is kept as is."""
    patient_key = record.patient_key
    if not _PSEUDONYM_RE.match(patient_key):
        patient_key = pseudonym(session, patient_key)
    patient = session.scalar(
        select(Patient).where(Patient.source == record.source, Patient.key == patient_key)
    )
    if patient is None:
        patient = Patient(source=record.source, key=patient_key)
        session.add(patient)
    study = Study(
        patient=patient,
        source=record.source,
        study_key=record.study_key,
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
