"""Plain, frozen records that importers produce and the storage layer persists.

Also the value normalisation every importer shares, so that a dataset's way of writing "missing"
(a bare NaN token, the string "nan", Python's None printed as "None") never becomes report text,
and splits are compared as train | valid | test whatever the dataset called them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date, time

FRONTAL_VIEWS = frozenset(
    {"PA", "AP", "AP AXIAL", "PA LLD", "AP LLD", "AP RLD", "PA RLD", "POSTERO_ANTERIOR",
     "ANTERO_POSTERIOR", "POSTERO ANTERIOR", "ANTERO POSTERIOR", "FRONTAL", "AP SUPINE",
     "SUPINE", "ERECT", "PA ERECT", "AP ERECT", "AP PORTABLE"}
)
LATERAL_VIEWS = frozenset(
    {"LATERAL", "LL", "RL", "LAT", "LEFT LATERAL", "RIGHT LATERAL", "XTABLE LATERAL", "LAO",
     "RAO", "LATERAL LEFT", "LATERAL RIGHT"}
)
_MISSING_TOKENS = frozenset({"nan", "none", "null", "n/a", "na", "<na>", "nat"})
_SPLITS = {
    "train": "train", "training": "train",
    "valid": "valid", "validate": "valid", "validation": "valid", "val": "valid", "dev": "valid",
    "test": "test", "testing": "test", "public_test": "test", "test_public": "test",
}


def view_group(view_position: str | None) -> str | None:
    """Map a DICOM/dataset view position to 'frontal', 'lateral' or None when unknown."""
    if not view_position:
        return None
    v = " ".join(view_position.strip().upper().replace("-", " ").replace("_", " ").split())
    if v in FRONTAL_VIEWS or v.replace(" ", "_") in FRONTAL_VIEWS:
        return "frontal"
    if v in LATERAL_VIEWS:
        return "lateral"
    return None


def text(value: object) -> str | None:
    """A dataset value as text, or None when the dataset means "missing".

    NaN floats (pandas, bare `NaN` JSON tokens), the strings "nan"/"None"/"null" that a
    `str()` of a missing value leaves behind, and blank strings are all missing. Whitespace is
    collapsed.
    """
    if value is None:
        return None
    if type(value) is str:
        out = " ".join(value.split())
        return out if out and out.lower() not in _MISSING_TOKENS else None
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        if value.is_integer():
            value = int(value)
    if isinstance(value, list | tuple | dict | set | bytes):
        return None  # nested structures are not text
    out = " ".join(str(value).split())
    if not out or out.lower() in _MISSING_TOKENS:
        return None
    return out


def normalise_split(raw: object) -> tuple[str | None, str | None]:
    """(train | valid | test | None, the raw value as the dataset wrote it)."""
    value = text(raw)
    if value is None:
        return None, None
    return _SPLITS.get(value.lower()), value


@dataclass(frozen=True)
class ImageSource:
    """One image of a study: a file on disk, or embedded bytes (datasets that inline images).

    `view_source` says where `view_position` came from: "metadata" (a dataset column), or None
    (unknown); a DICOM header's ViewPosition is read at import and recorded as "dicom".
    """

    name: str
    path: str | None = None
    data: bytes | None = None
    view_position: str | None = None
    view_source: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.data is None):
            raise ValueError(f"{self.name}: an image needs exactly one of path or data")


@dataclass(frozen=True)
class ReportSections:
    """The reference report of a study (sections may be missing in the source)."""

    findings: str | None = None
    impression: str | None = None


def reference(findings: object, impression: object) -> ReportSections | None:
    """A reference report, or None when neither section has text (never an empty row)."""
    f, i = text(findings), text(impression)
    return ReportSections(f, i) if f or i else None


@dataclass(frozen=True)
class StudyRecord:
    """What an importer knows about one study; `origin` names the file (and record) it came from."""

    source: str
    study_key: str
    patient_key: str
    origin: str
    study_date: date | None = None
    study_time: time | None = None
    split: str | None = None
    split_raw: str | None = None
    indication: str | None = None
    comparison: str | None = None
    demographics: dict[str, str] = field(default_factory=dict)
    images: tuple[ImageSource, ...] = ()
    reference: ReportSections | None = None
    # True when patient_key/study_key are raw hospital identifiers (e.g. read from DICOM
    # PatientID/StudyInstanceUID): the store replaces them by pseudonyms before saving.
    identifiers_are_phi: bool = False
    # Objects of the study that were skipped on purpose (e.g. DICOM SR/KO/PR), with the reason.
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RecordError:
    """A record an importer found but could not build: where it is and why it failed."""

    where: str
    reason: str
    record: str | None = None
