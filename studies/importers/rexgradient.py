"""ReXGradient-160K: `metadata/{train,valid,test}_metadata.json` (or .csv) with PatientID,
AccessionNumber, StudyDate, Indication, Comparison, Findings, Impression, ImagePath (one or more,
relative to the dataset root) and ImageViewPosition, plus `deid_png/...` image folders per
patient/study. The PNGs were made from DICOM with MONOCHROME1 already inverted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from studies.dates import parse_date
from studies.errors import DatasetLayoutError
from studies.importers.base import ImportOptions
from studies.importers.tables import as_list, read_csv, read_json_records
from studies.records import ImageSource, ReportSections, StudyRecord
from studies.reports import clean

SOURCE = "rexgradient"
REQUIRED = ("PatientID", "AccessionNumber", "StudyDate", "ImagePath")
_SPLITS = {"train": "train", "valid": "valid", "val": "valid", "validation": "valid",
           "test": "test", "public_test": "test"}


def metadata_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    folder = path / "metadata" if (path / "metadata").is_dir() else path
    return sorted(
        p for p in folder.iterdir()
        if p.is_file() and "_metadata" in p.name and p.suffix in (".json", ".csv", ".jsonl")
    )


class ReXGradientImporter:
    name = "rexgradient"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        try:
            files = metadata_files(path)
        except OSError:
            return False
        for f in files:
            with open(f, "rb") as fh:
                head = fh.read(4096)
            if b"AccessionNumber" in head and b"ImagePath" in head:
                return True
        return False

    def count(self, path: Path) -> int | None:
        return sum(len(self._studies(f)) for f in metadata_files(path))

    def read(self, path: Path) -> Iterator[StudyRecord]:
        files = metadata_files(path)
        if not files:
            raise DatasetLayoutError(str(path), "no *_metadata.json/.csv file found")
        root = self.options.images or (path.parent if path.is_file() else path)
        for meta in files:
            split = _SPLITS.get(meta.name.split("_metadata")[0].lower())
            for key, rows in self._studies(meta).items():
                yield self._record(meta, root, split, key, rows)

    @staticmethod
    def _studies(meta: Path) -> dict[str, list[dict]]:
        """Rows grouped by study: JSON has one row per study, CSV may have one per image."""
        rows = (read_json_records(meta) if meta.suffix in (".json", ".jsonl")
                else list(read_csv(meta, REQUIRED)))
        studies: dict[str, list[dict]] = defaultdict(list)
        for i, row in enumerate(rows):
            missing = [c for c in REQUIRED if c not in row]
            if missing:
                raise DatasetLayoutError(
                    str(meta), f"record {i} lacks {', '.join(missing)}"
                )
            studies[str(row["AccessionNumber"])].append(row)
        return studies

    @staticmethod
    def _record(meta: Path, root: Path, split: str | None, key: str, rows: list[dict]):
        first = rows[0]
        paths: list[str] = []
        views: list[str] = []
        for row in rows:
            p, v = as_list(row.get("ImagePath")), as_list(row.get("ImageViewPosition"))
            paths += p
            views += v + [""] * (len(p) - len(v))
        images = []
        for rel, view in zip(paths, views, strict=True):
            file = _resolve(root, rel)
            images.append(ImageSource(name=str(file), path=str(file), view_position=view or None))
        demographics = {
            name: str(first[col]) for name, col in (("sex", "PatientSex"), ("age", "PatientAge"))
            if first.get(col) not in (None, "")
        }
        return StudyRecord(
            source=SOURCE,
            study_key=key,
            patient_key=str(first["PatientID"]),
            origin=f"{meta}:{key}",
            study_date=parse_date(first.get("StudyDate"), f"{meta}:{key}"),
            split=split,
            indication=clean(first.get("Indication")),
            comparison=clean(first.get("Comparison")),
            demographics=demographics,
            images=tuple(images),
            reference=ReportSections(clean(first.get("Findings")), clean(first.get("Impression"))),
        )


def _resolve(root: Path, rel: str) -> Path:
    """Image paths are relative to the dataset root, with or without the `deid_png/` folder."""
    rel = rel.removeprefix("./")
    direct = root / rel
    if direct.exists() or rel.startswith("deid_png/"):
        return direct
    nested = root / "deid_png" / rel
    return nested if nested.exists() else direct
