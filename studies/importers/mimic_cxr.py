"""MIMIC-CXR-JPG: `files/pXX/pSUBJECT/sSTUDY/DICOM_ID.jpg`, `mimic-cxr-2.0.0-metadata.csv`,
`mimic-cxr-2.0.0-split.csv` and the sectioned reports `mimic_cxr_sectioned.csv` (from the
MIMIC-CXR code repository's section script; studies without it import without a reference).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from studies.dates import parse_date
from studies.errors import DatasetLayoutError
from studies.importers.base import ImportOptions
from studies.importers.tables import find_file, read_csv
from studies.records import ImageSource, ReportSections, StudyRecord
from studies.reports import clean

SOURCE = "mimic-cxr"
METADATA = "mimic-cxr-2.0.0-metadata.csv"
SPLIT = "mimic-cxr-2.0.0-split.csv"
SECTIONED = "mimic_cxr_sectioned.csv"


class MimicCxrImporter:
    name = "mimic-cxr"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        return path.is_dir() and find_file(path, METADATA) is not None

    def count(self, path: Path) -> int | None:
        return len(self._studies(path))

    def read(self, path: Path) -> Iterator[StudyRecord]:
        studies = self._studies(path)
        splits = self._splits(path)
        reports = self._reports(path)
        files_root = self.options.images or path
        for study_id, rows in studies.items():
            subject = rows[0]["subject_id"]
            folder = files_root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study_id}"
            images = tuple(
                ImageSource(
                    name=str(folder / f"{r['dicom_id']}.jpg"),
                    path=str(folder / f"{r['dicom_id']}.jpg"),
                    view_position=r.get("ViewPosition") or None,
                )
                for r in rows
            )
            report = reports.get(study_id)
            yield StudyRecord(
                source=SOURCE,
                study_key=study_id,
                patient_key=subject,
                origin=str(folder),
                study_date=parse_date(rows[0].get("StudyDate"), str(folder)),
                split=splits.get(study_id),
                comparison=report[2] if report else None,
                images=images,
                reference=ReportSections(report[0], report[1]) if report else None,
            )

    def _studies(self, path: Path) -> dict[str, list[dict[str, str]]]:
        meta = find_file(path, METADATA)
        if meta is None:
            raise DatasetLayoutError(str(path), f"{METADATA} not found")
        studies: dict[str, list[dict[str, str]]] = defaultdict(list)
        for row in read_csv(meta, ("dicom_id", "subject_id", "study_id")):
            studies[row["study_id"]].append(row)
        return studies

    @staticmethod
    def _splits(path: Path) -> dict[str, str]:
        split = find_file(path, SPLIT)
        if split is None:
            return {}
        return {r["study_id"]: r["split"] for r in read_csv(split, ("study_id", "split"))}

    @staticmethod
    def _reports(path: Path) -> dict[str, tuple[str | None, str | None, str | None]]:
        sectioned = find_file(path, SECTIONED)
        if sectioned is None:
            return {}
        out = {}
        for r in read_csv(sectioned, ("study", "findings", "impression")):
            out[r["study"].lstrip("s")] = (
                clean(r["findings"]), clean(r["impression"]), clean(r.get("comparison"))
            )
        return out
