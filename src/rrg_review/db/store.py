"""The queries and writes that the services share. Callers own the transaction (Database.write)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import secrets
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from datetime import time as dtime
from pathlib import Path
from typing import Any

from sqlalchemy import Executable, Table, func, insert, select
from sqlalchemy.orm import Session, selectinload

from rrg_review.db.engine import Database, DatabaseProblem
from rrg_review.db.models import (
    Image,
    Meta,
    Patient,
    ReferenceReport,
    ReferenceReportVersion,
    Study,
    table_of,
    utcnow,
)
from rrg_review.db.sorting import study_sort_key
from rrg_review.studies.importers.folder import SOURCE as FOLDER
from rrg_review.studies.pixels import ImageInfo
from rrg_review.studies.records import StudyRecord, view_group

ENV_KEY = "RRG_REVIEW_KEY"  # its name, for messages: app/settings.py reads it (64 hex digits)
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
    """The HMAC key for pseudonyms: the key the settings chose (`Database.configured_key`,
    from $RRG_REVIEW_KEY), else the key file next to the database
    (`<db>.key`, 0600), created on first use. The database holds only a check value, so a copy
    of the database alone cannot be used to reverse a pseudonym by trying every MRN.

    A key that used to live in the database (before revision 0004) is moved out to the file.
    A database that already has pseudonyms but whose key is gone is refused rather than given
    a new key, which would silently split every patient in two.
    """
    db: Database | None = session.info.get("database")
    if db is not None and db._key is not None:
        return db._key
    key_file: Path | None = getattr(db, "key_file", None)
    stored_check = session.get(Meta, _KEY_CHECK)
    legacy = session.get(Meta, _LEGACY_SALT)
    configured = (getattr(db, "configured_key", None) or "").strip()
    if configured:
        try:
            key = bytes.fromhex(configured)
        except ValueError:
            raise PseudonymKeyError(f"{ENV_KEY} is not a hex key") from None
        where = ENV_KEY
    elif key_file is not None and key_file.is_file():
        key, where = _read_key_file(key_file), str(key_file)
    elif key_file is None:
        where_db = db.url if db is not None else "this database"
        raise PseudonymKeyError(f"set {ENV_KEY} (64 hex digits) for pseudonyms in {where_db}")
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


_FOLDER_KEYS_DONE = "folder_study_keys_pseudonymised"  # set once the one-off rewrite ran


def pseudonymise_folder_study_keys(session: Session) -> int:
    """Replace the study keys of plain-folder studies stored as folder paths (by versions that
    kept `DOE_JOHN_MRN-5550001/`-style names as keys) with the pseudonyms the folder importer
    now stores, so that a re-import of the folder updates the same study instead of adding a
    second one. Runs once per database (a meta row says it ran): keys kept later on purpose
    (`import --keep-folder-names`) are never rewritten. Every pseudonymous key's sort key
    becomes its study date (db.sorting.study_sort_key). Returns how many keys changed."""
    if session.get(Meta, _FOLDER_KEYS_DONE) is not None:
        return 0
    raw = [s for s in session.scalars(select(Study).where(Study.source == FOLDER))
           if not _PSEUDONYM_RE.match(s.study_key)]
    for study in raw:
        study.study_key = pseudonym(session, study.study_key)
    # pseudonymous keys (these, and DICOM UIDs stored before) sort by date, not by pseudonym
    for study in session.scalars(select(Study).where(Study.study_key.like("anon-%"))):
        if _PSEUDONYM_RE.match(study.study_key):
            study.sort_key = study_sort_key(study.study_key, True, study.study_date,
                                            study.study_time)
    session.add(Meta(key=_FOLDER_KEYS_DONE, value=str(len(raw))))
    session.flush()
    return len(raw)


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


def _next_id(session: Session, table: Table) -> int:
    return int(session.scalar(select(func.coalesce(func.max(table.c.id), 0))) or 0) + 1


def _image_row(study_id: int, position: int, stored: StoredImage) -> dict[str, Any]:
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
    patient_table, study_table = table_of(Patient), table_of(Study)
    image_table, ref_table = table_of(Image), table_of(ReferenceReport)
    new_patients: list[dict[str, Any]] = []
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
    studies: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    refs: list[dict[str, Any]] = []
    ids: list[int] = []
    for record, stored, fingerprint in items:
        ids.append(study_id)
        studies.append(dict(
            id=study_id, patient_id=patients[(record.source, record.patient_key)],
            source=record.source, study_key=record.study_key, study_date=record.study_date,
            study_time=record.study_time, split=record.split, split_raw=record.split_raw,
            indication=record.indication, comparison=record.comparison,
            demographics=dict(record.demographics), created_at=now, fingerprint=fingerprint,
            sort_key=study_sort_key(record.study_key, bool(_PSEUDONYM_RE.match(record.study_key)),
                                    record.study_date, record.study_time),
            image_count=len(stored),
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
        session.execute(insert(table_of(Image)), [
            _image_row(study.id, position + i, im) for i, im in enumerate(new_images)])
        study.image_count = len(study.images) + len(new_images)
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
    """Insert one study with its patient (found or created), images and reference report.

    Every patient identifier, whatever importer it came from (DICOM PatientID, a dataset's
    subject id, `report.json`'s patient_id, a folder name), is stored as a keyed pseudonym;
    one this store already made is kept as is."""
    if not _PSEUDONYM_RE.match(record.patient_key):
        record = replace(record, patient_key=pseudonym(session, record.patient_key))
    patients = {}
    existing = session.scalar(
        select(Patient.id).where(Patient.source == record.source, Patient.key == record.patient_key)
    )
    if existing is not None:
        patients[(record.source, record.patient_key)] = existing
    (study_id,) = insert_studies(session, [(record, images, None)], patients)
    return session.get_one(Study, study_id)


def get_study(session: Session, study_id: int) -> Study | None:
    """A study with its images, reference and patient loaded."""
    return session.scalar(
        select(Study)
        .where(Study.id == study_id)
        .options(selectinload(Study.images), selectinload(Study.reference),
                 selectinload(Study.patient))
    )


def _is_prior(candidate: tuple[int, date | None, dtime | None], study: Study) -> bool:
    """Earlier by date, or the same day and earlier by time when both have a time (portable
    ICU films are priors of each other)."""
    _, day, at = candidate
    if day is None or study.study_date is None:
        return False
    if day != study.study_date:
        return day < study.study_date
    return at is not None and study.study_time is not None and at < study.study_time


def _newest_first(
        candidate: tuple[int, date | None, dtime | None]) -> tuple[date | None, bool, dtime, int]:
    sid, day, at = candidate
    return (day, at is not None, at or dtime.min, sid)


def prior_ids_of(session: Session, studies: Sequence[Study]) -> dict[int, list[int]]:
    """Each study's priors (the same patient's earlier studies), newest first, as ids: one
    query on the patient index for a whole batch, no study or image loaded.

    Args:
        session: an open session.
        studies: the studies (with `patient_id`, `study_date`, `study_time`).
    Returns:
        study id -> prior study ids, most recent first (empty without a study date).
    """
    patients = {st.patient_id for st in studies if st.study_date is not None}
    by_patient: dict[int, list[tuple[int, date | None, dtime | None]]] = defaultdict(list)
    if patients:
        for sid, pid, day, at in session.execute(
                select(Study.id, Study.patient_id, Study.study_date, Study.study_time)
                .where(Study.patient_id.in_(patients), Study.study_date.is_not(None))):
            by_patient[pid].append((sid, day, at))
    return {st.id: [c[0] for c in sorted((c for c in by_patient.get(st.patient_id, ())
                                          if _is_prior(c, st)), key=_newest_first,
                                         reverse=True)]
            for st in studies}


def prior_ids(session: Session, study: Study) -> list[int]:
    """The same patient's earlier studies' ids, most recent first (see `prior_ids_of`)."""
    return prior_ids_of(session, [study])[study.id]


def priors(session: Session, study: Study) -> list[Study]:
    """The same patient's earlier studies, most recent first, with their reference reports
    (two queries; images are not loaded).

    Same-day studies (portable ICU films) are priors of each other by study time when both
    have one.
    """
    ids = prior_ids(session, study)
    return load_studies(session, ids, images=False) if ids else []


def load_studies(session: Session, ids: Sequence[int], *, images: bool = True,
                 patient: bool = False) -> list[Study]:
    """The studies `ids` in that order (missing ids left out) with their reference and, when
    asked, their images and patient: one statement per relationship, whatever the count."""
    options = [selectinload(Study.reference)]
    if images:
        options.append(selectinload(Study.images))
    if patient:
        options.append(selectinload(Study.patient))
    found = {st.id: st for st in session.scalars(
        select(Study).where(Study.id.in_(set(ids))).options(*options))}
    return [found[i] for i in ids if i in found]


@dataclass(frozen=True)
class StoreCounts:
    patients: int
    studies: int
    images: int
    references: int
    with_both_sections: int


def counts(session: Session, source: str | None = None) -> StoreCounts:
    def n(stmt: Executable) -> int:
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
