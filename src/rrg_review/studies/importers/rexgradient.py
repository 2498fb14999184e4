"""ReXGradient-160K as downloaded.

`metadata/` holds, per split (train, valid, test):
- `{split}_metadata_view_position.json`: a dict keyed
  `p<PatientID>_a<AccessionNumber>_s<StudyInstanceUid>`, one study each, with `ImagePath` a list
  of paths written relative to `metadata/` (`"../deid_png/<PatientID>/<Acc>/studies/<StudyUID>/
  series/<SeriesUID>/instances/<SOPUID>.png"`),
  parallel lists `ImageViewPosition`, `ImageShape`, ..., `StudyDate` an int (20130105),
  `PatientAge` like "062Y", and missing values as bare `NaN` tokens;
- `{split}_metadata.csv` / `{split}_metadata.json`: the same studies, one row each, without
  `ImagePath`.
The view-position file is used when present (it has the images); otherwise the plain metadata
imports the studies as references without images. The PNGs were made from DICOM with MONOCHROME1
already inverted.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from rrg_review.studies.dates import parse_date
from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.importers.base import ImportOptions, Item, build, file_failure
from rrg_review.studies.importers.tables import as_list, head_bytes, read_csv, read_json_records
from rrg_review.studies.records import ImageSource, StudyRecord, normalise_split, reference, text
from rrg_review.studies.safety import Guard

SOURCE = "rexgradient"
_FILE_RE = re.compile(r"^(?P<split>[A-Za-z_]+?)_metadata(?P<view>_view_position)?"
                      r"\.(?P<ext>json|jsonl|csv)(\.gz)?$")
_KEY_RE = re.compile(r"^p(?P<patient>.+?)_a(?P<acc>.+?)_s(?P<uid>.+)$")


def metadata_files(path: Path) -> list[Path]:
    """The metadata files to read: per split the view-position JSON if present, else the
    plain table (JSON preferred to CSV: it keeps types)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise DatasetLayoutError(str(path), "not a regular file or folder (a FIFO, socket or "
                                            "device is never opened)")
    folder = path / "metadata" if (path / "metadata").is_dir() else path
    by_split: dict[str, list[tuple[int, Path]]] = {}
    for p in sorted(folder.iterdir()):
        m = _FILE_RE.match(p.name)
        if not m or not p.is_file() or p.is_symlink():
            continue
        rank = 0 if m["view"] else (1 if m["ext"] in ("json", "jsonl") else 2)
        by_split.setdefault(m["split"].lower(), []).append((rank, p))
    return [min(files)[1] for _, files in sorted(by_split.items())]


class ReXGradientImporter:
    name = "rexgradient"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        try:
            files = metadata_files(path)
        except OSError:
            return False
        return any(b"AccessionNumber" in head_bytes(f) for f in files)

    def root(self, path: Path) -> Path:
        folder = path.parent if path.is_file() else path
        return folder.parent if folder.name == "metadata" else folder

    def count(self, path: Path) -> int | None:
        return None

    def read(self, path: Path) -> Iterator[Item]:
        files = metadata_files(path)
        if not files:
            raise DatasetLayoutError(str(path), "no {split}_metadata[_view_position].json/.csv "
                                                "file found")
        guard = self.options.guard_for(self.root(path))
        tables = [(meta, self._rows(meta, guard)) for meta in files]  # layout errors first
        for meta, rows in tables:
            split, raw_split = _split_of(meta)
            done = 0
            try:
                for key, row in rows:
                    origin = f"{meta}"
                    yield build(origin, self._record, meta, guard, split, raw_split, key, row,
                                record=key)
                    done += 1
            except (StudyLoadError, OSError, ValueError) as exc:
                yield file_failure(meta, exc, done)

    def _rows(self, meta: Path, guard: Guard) -> Iterator[tuple[str | None, object]]:
        if ".csv" in meta.suffixes:
            rows = read_csv(meta, ("PatientID", "AccessionNumber"), guard)
            first = next(rows, None)  # the header (and its layout error) before anything else

            def gen() -> Iterator[tuple[str | None, object]]:
                if first is None:
                    return
                yield first.get("id") or None, first
                for row in rows:
                    yield row.get("id") or None, row
            return gen()
        pairs = read_json_records(meta, guard)
        sample = next((r for _, r in pairs if isinstance(r, dict)), None)
        if sample is not None and not ({"PatientID", "AccessionNumber"} <= set(sample)):
            raise DatasetLayoutError(str(meta), "records lack PatientID/AccessionNumber; found: "
                                     + ", ".join(sorted(map(str, sample))[:20]))
        return iter(pairs)

    def _record(self, meta: Path, guard: Guard, split: str | None, raw_split: str | None,
                key: str | None,
                row: object) -> StudyRecord:
        origin = f"{meta} [{key}]" if key else str(meta)
        if not isinstance(row, dict):
            raise StudyLoadError(origin, f"record is a {type(row).__name__}, not an object")
        parsed = _KEY_RE.match(key or "")
        patient = text(row.get("PatientID")) or (parsed["patient"] if parsed else None)
        accession = text(row.get("AccessionNumber")) or (parsed["acc"] if parsed else None)
        if not patient or not accession:
            raise StudyLoadError(origin, "record has no PatientID/AccessionNumber")
        paths = as_list(row.get("ImagePath"))
        if not paths and "_view_position" in meta.name:
            raise StudyLoadError(origin, "record has no ImagePath (a study without images is not "
                                         "stored from the view-position file)")
        views = as_list(row.get("ImageViewPosition"))
        if views and len(views) != len(paths):
            raise StudyLoadError(origin, f"{len(paths)} ImagePath but {len(views)} "
                                         "ImageViewPosition values")
        base = meta.parent
        images = []
        for i, rel in enumerate(paths):
            if self.options.images is not None and isinstance(rel, str):
                rel_images = rel.lstrip("./").removeprefix("deid_png/") if rel.startswith(
                    ("../", "./", "deid_png/")) else rel
                file = guard.inside(self.options.images, _strip_parent(rel_images), origin)
            else:
                file = guard.inside(base if str(rel).startswith("../") else self.root(meta),
                                    rel, origin)
            view = text(views[i]) if views else None
            images.append(ImageSource(name=str(file), path=str(file), view_position=view,
                                      view_source="metadata" if view else None))
        demographics = {name: v for name, col in (("sex", "PatientSex"), ("age", "PatientAge"))
                        if (v := text(row.get(col))) is not None}
        row_split, row_raw = normalise_split(row.get("split"))
        return StudyRecord(
            source=SOURCE,
            study_key=accession,
            patient_key=patient,
            origin=origin,
            study_date=parse_date(text(row.get("StudyDate")), origin),
            split=row_split or split,
            split_raw=row_raw or raw_split,
            indication=text(row.get("Indication")),
            comparison=text(row.get("Comparison")),
            demographics=demographics,
            images=tuple(images),
            reference=reference(row.get("Findings"), row.get("Impression")),
        )


def _strip_parent(rel: str) -> str:
    while rel.startswith("../"):
        rel = rel[3:]
    return rel


def _split_of(meta: Path) -> tuple[str | None, str | None]:
    m = _FILE_RE.match(meta.name)
    return normalise_split(m["split"] if m else None)
