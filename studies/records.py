"""Plain, frozen records that importers produce and the storage layer persists."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

FRONTAL_VIEWS = frozenset(
    {"PA", "AP", "AP AXIAL", "PA LLD", "AP LLD", "AP RLD", "PA RLD", "POSTERO_ANTERIOR",
     "ANTERO_POSTERIOR", "FRONTAL", "AP SUPINE", "SUPINE", "ERECT"}
)
LATERAL_VIEWS = frozenset(
    {"LATERAL", "LL", "RL", "LAT", "LEFT LATERAL", "RIGHT LATERAL", "XTABLE LATERAL", "LAO", "RAO"}
)


def view_group(view_position: str | None) -> str | None:
    """Map a DICOM/dataset view position to 'frontal', 'lateral' or None when unknown."""
    if not view_position:
        return None
    v = view_position.strip().upper().replace("-", " ")
    if v in FRONTAL_VIEWS:
        return "frontal"
    if v in LATERAL_VIEWS:
        return "lateral"
    return None


@dataclass(frozen=True)
class ImageSource:
    """One image of a study: a file on disk, or embedded bytes (datasets that inline images)."""

    name: str
    path: str | None = None
    data: bytes | None = None
    view_position: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.data is None):
            raise ValueError(f"{self.name}: an image needs exactly one of path or data")


@dataclass(frozen=True)
class ReportSections:
    """The reference report of a study (sections may be missing in the source)."""

    findings: str | None = None
    impression: str | None = None


@dataclass(frozen=True)
class StudyRecord:
    """What an importer knows about one study; `origin` names the file it came from."""

    source: str
    study_key: str
    patient_key: str
    origin: str
    study_date: date | None = None
    split: str | None = None
    indication: str | None = None
    comparison: str | None = None
    demographics: dict[str, str] = field(default_factory=dict)
    images: tuple[ImageSource, ...] = ()
    reference: ReportSections | None = None
    # True when patient_key/study_key are raw hospital identifiers (e.g. read from DICOM
    # PatientID/AccessionNumber): the store replaces them by pseudonyms before saving.
    identifiers_are_phi: bool = False
