"""Metadata-only studies in bulk, for the worklist benchmark and tests at dataset scale.

160,000 studies go in with a few executemany INSERTs (about ten seconds), instead of importing
160,000 records through the importer. Studies may point at one real image file (so opening one
decodes a real radiograph) or have no images (report-only references).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import date, timedelta

from sqlalchemy import insert, select

from rrg_review.db.engine import Database
from rrg_review.db.models import Draft, Image, Patient, ReferenceReport, Study, utcnow
from rrg_review.db.sorting import natural_key
from rrg_review.db.store import pseudonym_key


@dataclass(frozen=True)
class SyntheticImage:
    """One real file that every synthetic study with an image points at."""

    path: str
    rows: int
    cols: int
    bits_stored: int = 16
    photometric: str = "MONOCHROME2"
    fmt: str = "dicom"

    @property
    def checksum(self) -> str:
        with open(self.path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()


def add_studies(db: Database, count: int, *, source: str = "bench", prefix: str = "CXR",
                image: SyntheticImage | None = None, report_only_every: int = 0,
                studies_per_patient: int = 2, splits: tuple[str, ...] = ("train",),
                start: int = 1, chunk: int = 20_000, pseudonymised: bool = False,
                draft_preset: str | None = None) -> list[int]:
    """Add `count` studies keyed prefix1..prefixN (natural order != text order on purpose);
    every `report_only_every`-th study has no image. Patients are `<source>-P<n>`, stored as
    their pseudonyms with `pseudonymised` (as the importer stores them, so the app does not
    rewrite them at start). With `draft_preset`, every study with an image also gets a draft
    of both sections by that preset (a study must have a draft before a reader can rate it).
    Returns the new study ids."""
    checksum = image.checksum if image else ""
    now = utcnow()
    ids: list[int] = []
    secret = None
    if pseudonymised:
        with db.write() as s:
            secret = pseudonym_key(s)

    def name(key: str) -> str:
        if secret is None:
            return key
        return "anon-" + hmac.new(secret, key.encode(), hashlib.sha256).hexdigest()[:16]
    with db.engine.begin() as conn:
        patient_ids: dict[int, int] = {}
        first_patient = (start - 1) // studies_per_patient
        last_patient = (start + count - 2) // studies_per_patient
        wanted = {name(f"{source}-P{p}"): p for p in range(first_patient, last_patient + 1)}
        number = dict(wanted)
        existing = select(Patient.id, Patient.key).where(Patient.source == source)
        for pid, key in (conn.execute(existing) if start > 1 else ()):
            if key in wanted:
                patient_ids[wanted.pop(key)] = pid
        rows = [{"source": source, "key": key} for key in wanted]
        for i in range(0, len(rows), chunk):
            part = rows[i:i + chunk]
            result = conn.execute(insert(Patient).returning(Patient.id, Patient.key), part)
            for pid, key in result:
                patient_ids[number[key]] = pid
        for lo in range(start, start + count, chunk):
            hi = min(lo + chunk, start + count)
            studies = []
            for n in range(lo, hi):
                has_image = image is not None and not (report_only_every and
                                                       n % report_only_every == 0)
                key = f"{prefix}{n}"
                studies.append({
                    "patient_id": patient_ids[(n - 1) // studies_per_patient],
                    "source": source, "study_key": key, "sort_key": natural_key(key),
                    "study_date": date(2020, 1, 1) + timedelta(days=n % 1500),
                    "split": splits[n % len(splits)], "indication": "Cough.",
                    "comparison": None, "demographics": {}, "created_at": now,
                    "image_count": 1 if has_image else 0})
            new = [int(r[0]) for r in conn.execute(insert(Study).returning(Study.id), studies)]
            ids.extend(new)
            conn.execute(insert(ReferenceReport), [
                {"study_id": sid, "findings": f"Finding {sid}: the lungs are clear.",
                 "impression": "No acute disease."} for sid in new])
            if image is not None:
                conn.execute(insert(Image), [
                    {"study_id": sid, "position": 0, "uri": image.path, "format": image.fmt,
                     "view_position": "PA", "view_group": "frontal", "laterality": None,
                     "body_part": "CHEST", "rows": image.rows, "cols": image.cols,
                     "photometric": image.photometric, "bits_stored": image.bits_stored,
                     "checksum": checksum}
                    for sid, row in zip(new, studies, strict=True) if row["image_count"]])
            if draft_preset is not None:
                conn.execute(insert(Draft), [
                    {"study_id": sid, "section": section, "preset": draft_preset,
                     "text": text, "model_id": "bench/synthetic", "generation": {},
                     "created_at": now}
                    for sid, row in zip(new, studies, strict=True) if row["image_count"]
                    for section, text in (("findings", f"Drafted finding {sid}: no effusion."),
                                          ("impression", "No acute cardiopulmonary process."))])
    return ids
