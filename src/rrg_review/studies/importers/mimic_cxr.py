"""MIMIC-CXR-JPG as downloaded: `files/pXX/pSUBJECT/sSTUDY/DICOM_ID.jpg`,
`mimic-cxr-2.0.0-metadata.csv[.gz]` (one row per image: dicom_id, subject_id, study_id,
ViewPosition, StudyDate, StudyTime, ...), `mimic-cxr-2.0.0-split.csv[.gz]` (train | validate |
test) and the sectioned reports `mimic_cxr_sectioned.csv[.gz]` from MIT-LCP's
`create_section_files.py` (study, impression, findings, last_paragraph, comparison, indication;
empty cells for missing sections).

Point it at the version folder (`.../mimic-cxr-jpg/2.0.0`) or any parent of it
(`physionet.org/files/mimic-cxr-jpg`): the metadata file is searched up to three levels down.
A study whose report has text only in `last_paragraph` imports without a reference (the script
could not tell findings from impression).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from rrg_review.studies.dates import parse_date, parse_time
from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.importers.base import ImportOptions, Item, build, file_failure
from rrg_review.studies.importers.tables import find_file, read_csv
from rrg_review.studies.records import ImageSource, StudyRecord, normalise_split, reference, text
from rrg_review.studies.safety import Guard

SOURCE = "mimic-cxr"
METADATA = "mimic-cxr-2.0.0-metadata.csv"
SPLIT = "mimic-cxr-2.0.0-split.csv"
SECTIONED = "mimic_cxr_sectioned.csv"
_DEPTH = 3
_ID_RE = re.compile(r"^[0-9]+$")
_DICOM_ID_RE = re.compile(r"^[0-9A-Za-z-]+$")


class MimicCxrImporter:
    name = "mimic-cxr"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        return path.is_dir() and find_file(path, METADATA, depth=_DEPTH) is not None

    def _metadata(self, path: Path) -> Path:
        meta = find_file(path, METADATA, depth=_DEPTH)
        if meta is None:
            raise DatasetLayoutError(str(path), f"{METADATA}[.gz] not found (searched "
                                                f"{_DEPTH} levels down)")
        return meta

    def root(self, path: Path) -> Path:
        return path

    def count(self, path: Path) -> int | None:
        return None

    def read(self, path: Path) -> Iterator[Item]:
        meta = self._metadata(path)
        dataset = meta.parent
        guard = self.options.guard_for(self.root(path))
        rows = read_csv(meta, ("dicom_id", "subject_id", "study_id"), guard)
        splits = self._splits(dataset, guard)
        reports = self._reports(dataset, guard)
        files_root = self.options.images or dataset
        studies: dict[str, list[dict[str, str]]] = {}
        failure = None
        try:
            for row in rows:
                studies.setdefault(row.get("study_id") or "", []).append(row)
        except DatasetLayoutError:
            raise
        except StudyLoadError as exc:
            failure = file_failure(meta, exc, len(studies))
        for study_id, group in studies.items():
            yield build(str(meta), self._record, meta, files_root, guard, study_id, group,
                        splits, reports, record=f"study {study_id}")
        if failure is not None:
            yield failure

    def _record(self, meta: Path, files_root: Path, guard: Guard, study_id: str,
                rows: list[dict[str, str]], splits: dict[str, tuple[str | None, str | None]],
                reports: dict[str, tuple[str | None, str | None, str | None, str | None]]
                ) -> StudyRecord:
        origin = f"{meta} [study {study_id}]"
        subject = (rows[0].get("subject_id") or "").strip()
        if not _ID_RE.match(study_id or "") or not _ID_RE.match(subject):
            raise StudyLoadError(origin, f"invalid study_id/subject_id {study_id!r}/{subject!r}")
        folder = f"files/p{subject[:2]}/p{subject}/s{study_id}"
        images = []
        for r in rows:
            dicom = (r.get("dicom_id") or "").strip()
            if not _DICOM_ID_RE.match(dicom):
                raise StudyLoadError(origin, f"invalid dicom_id {dicom!r}")
            file = guard.inside(files_root, f"{folder}/{dicom}.jpg", origin)
            view = text(r.get("ViewPosition"))
            images.append(ImageSource(name=str(file), path=str(file), view_position=view,
                                      view_source="metadata" if view else None))
        split, raw = splits.get(study_id, (None, None))
        report = reports.get(study_id)
        first = rows[0]
        return StudyRecord(
            source=SOURCE,
            study_key=study_id,
            patient_key=subject,
            origin=origin,
            study_date=parse_date(text(first.get("StudyDate")), origin),
            study_time=parse_time(first.get("StudyTime"), numeric=True),
            split=split,
            split_raw=raw,
            comparison=report[2] if report else None,
            indication=report[3] if report else None,
            images=tuple(images),
            reference=reference(report[0], report[1]) if report else None,
        )

    @staticmethod
    def _splits(dataset: Path, guard: Guard) -> dict[str, tuple[str | None, str | None]]:
        split = find_file(dataset, SPLIT)
        if split is None:
            return {}
        out = {}
        for r in read_csv(split, ("study_id", "split"), guard):
            out[r["study_id"]] = normalise_split(r["split"])
        return out

    @staticmethod
    def _reports(dataset: Path, guard: Guard) -> dict[
            str, tuple[str | None, str | None, str | None, str | None]]:
        sectioned = find_file(dataset, SECTIONED)
        if sectioned is None:
            return {}
        out = {}
        for r in read_csv(sectioned, ("study", "findings", "impression"), guard):
            out[(r["study"] or "").lstrip("s")] = (
                text(r["findings"]), text(r["impression"]), text(r.get("comparison")),
                text(r.get("indication")),
            )
        return out
