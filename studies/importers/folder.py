"""A plain folder: one sub-folder per study holding its images (DICOM/PNG/JPEG), optionally a
`report.json` ({"findings", "impression", "indication", "comparison", "patient_id",
"study_date", "split", "sex", "age"}) or a sectioned `report.txt` ("FINDINGS: ... IMPRESSION: ...").

Patient and date come from report.json, else from the DICOM header (PatientID and AccessionNumber
are pseudonymised by the store, never kept as such), else the sub-folder is its own patient.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from pathlib import Path

from studies.dates import parse_date
from studies.errors import DatasetLayoutError, StudyLoadError
from studies.importers.base import ImportOptions
from studies.records import ImageSource, ReportSections, StudyRecord
from studies.reports import clean, split_sections

SOURCE = "folder"
IMAGE_SUFFIXES = (".dcm", ".dicom", ".png", ".jpg", ".jpeg")


def image_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


class FolderImporter:
    name = "folder"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        return path.is_dir() and any(image_files(d) for d in _study_dirs(path))

    def count(self, path: Path) -> int | None:
        return sum(1 for d in _study_dirs(path) if image_files(d))

    def read(self, path: Path) -> Iterator[StudyRecord]:
        if not path.is_dir():
            raise DatasetLayoutError(str(path), "a plain-folder import needs a directory")
        for folder in _study_dirs(path):
            files = image_files(folder)
            if files:
                yield _study(path, folder, files)


def _study_dirs(root: Path) -> list[Path]:
    return sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))


def _study(root: Path, folder: Path, files: list[Path]) -> StudyRecord:
    meta: dict = {}
    report: ReportSections | None = None
    if (folder / "report.json").is_file():
        try:
            meta = json.loads((folder / "report.json").read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StudyLoadError(str(folder / "report.json"), f"invalid JSON ({exc})") from exc
        if not isinstance(meta, dict):
            raise StudyLoadError(str(folder / "report.json"), "expected a JSON object")
        report = ReportSections(clean(meta.get("findings")), clean(meta.get("impression")))
    elif (folder / "report.txt").is_file():
        sections = split_sections((folder / "report.txt").read_text(encoding="utf-8"))
        meta = {k: v for k, v in sections.items() if k in ("indication", "comparison")}
        report = ReportSections(sections.get("findings"), sections.get("impression"))
    if report is not None and report.findings is None and report.impression is None:
        report = None

    header = _dicom_header(files)
    patient = meta.get("patient_id")
    phi = False
    if not patient and header.get("PatientID"):
        patient, phi = header["PatientID"], True
    study_date: date | None = parse_date(meta.get("study_date"), str(folder / "report.json"))
    if study_date is None and header.get("StudyDate"):
        study_date = parse_date(header["StudyDate"], str(files[0]))
    demographics = {
        k: str(v) for k, v in (("sex", meta.get("sex") or header.get("PatientSex")),
                               ("age", meta.get("age") or header.get("PatientAge"))) if v
    }
    key = f"{root.name}/{folder.name}"
    return StudyRecord(
        source=SOURCE,
        study_key=key,
        patient_key=str(patient) if patient else key,
        origin=str(folder),
        study_date=study_date,
        split=meta.get("split"),
        indication=clean(meta.get("indication")),
        comparison=clean(meta.get("comparison")),
        demographics=demographics,
        images=tuple(ImageSource(name=str(f), path=str(f)) for f in files),
        reference=report,
        identifiers_are_phi=phi,
    )


def _dicom_header(files: list[Path]) -> dict[str, str]:
    """Only the few header fields a study needs, from the first DICOM of the folder."""
    import pydicom

    for f in files:
        if f.suffix.lower() in (".dcm", ".dicom"):
            try:
                ds = pydicom.dcmread(f, stop_before_pixels=True)
            except Exception as exc:
                raise StudyLoadError(str(f), f"not a valid DICOM file ({exc})") from exc
            return {
                k: str(ds.get(k)).strip()
                for k in ("PatientID", "StudyDate", "PatientSex", "PatientAge")
                if ds.get(k) not in (None, "")
            }
    return {}
