"""interpret-cxr, the RRG24 Hugging Face layout: rows with `source`, `findings`, `impression` and
`images` (embedded image structs {bytes, path}; `bytes` may be None with a path) and/or
`images_path` (paths relative to the dataset folder or the --images root). Read from

- a `DatasetDict.save_to_disk` folder (`dataset_dict.json`, one folder per split) or a single
  `Dataset.save_to_disk` folder (`state.json` naming its `_split`, Arrow stream files);
- a `load_dataset` cache folder (`dataset_info.json` + `<name>-<split>-00000-of-0000N.arrow`);
- Parquet files or folders (`train-00000-of-00010.parquet`, `data/validation-...`);
- JSON / JSON Lines, including `train_mimic.json` / `val_mimic.json` written by RRG24's
  `make-interpret-mimic-cxr.py` into the MIMIC-CXR-JPG root (image paths `files/p10/...`).

Splits come from the folder/file/state names and are normalised (`validation`, `val` ->
`valid`), the raw name kept. A test set without findings/impression columns imports without
references. The rows carry no study or patient ids: a study is keyed by its first image path
when there is one (patient from a MIMIC `pNNNNNNNN` folder in that path), else by split and row
number. `Study.source` keeps the row's `source` so scores break down per dataset.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.importers.base import ImportOptions, Item, build, file_failure
from rrg_review.studies.importers.tables import head_bytes, read_json_records
from rrg_review.studies.records import ImageSource, StudyRecord, normalise_split, reference, text
from rrg_review.studies.safety import Guard

log = logging.getLogger(__name__)

JsonParts = dict[Path, list[tuple[str | None, object]]]  # file -> (key, record) rows

_PREFIX = "interpret-cxr"
_SPLIT_IN_NAME = re.compile(
    r"(?:^|[-_/])(train|training|validation|validate|valid|val|dev|test)(?=$|[-_.])",
    re.IGNORECASE)
_MIMIC_SUBJECT = re.compile(r"(?:^|/)p(\d{8})/s\d+/")
_META_FILES = ("state.json", "dataset_info.json", "dataset_dict.json")


class InterpretCxrImporter:
    name = "interpret-cxr"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        if path.is_dir():
            if any((path / m).is_file() for m in _META_FILES) and (
                    any(path.glob("*.arrow")) or any(path.glob("*/*.arrow"))
                    or (path / "dataset_dict.json").is_file()):
                return True
            if any(path.glob("*.parquet")) or any(path.glob("*/*.parquet")):
                return True
            return any(_json_has_rows(p) for p in sorted(path.glob("*.json*"))[:20])
        return path.suffix in (".parquet", ".arrow") or (
            path.suffix in (".json", ".jsonl") and _json_has_rows(path))

    def root(self, path: Path) -> Path:
        return path if path.is_dir() else path.parent

    def count(self, path: Path) -> int | None:
        return None

    def read(self, path: Path) -> Iterator[Item]:
        images_root = self.options.images or self.root(path)
        guard = self.options.guard_for(self.root(path))
        parts = self._parts(path)
        parsed: JsonParts = {}  # JSON parts: parsed once for the columns and the rows
        for _, part in parts:
            _check_columns(part, _columns(part, guard, parsed))
        for split, part in parts:
            norm, raw = normalise_split(split)
            row_no = 0
            try:
                for batch in _batches(part, guard, parsed):
                    for row in batch:
                        yield build(f"{part}#row{row_no}", _record, row, norm, raw, part, row_no,
                                    images_root, guard, record=f"row {row_no}")
                        row_no += 1
            except (StudyLoadError, OSError, ValueError) as exc:
                yield file_failure(part, exc, row_no)
            except Exception as exc:  # pyarrow's errors on a corrupt file
                log.debug("reading %s stopped at row %s", part, row_no, exc_info=True)
                yield file_failure(part, exc, row_no)

    def _parts(self, path: Path) -> list[tuple[str | None, Path]]:
        """(split, file) for every data file."""
        if path.is_file():
            return [(_split_from_name(path.name), path)]
        if (path / "dataset_dict.json").is_file():
            try:
                splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
            except (OSError, ValueError, AttributeError) as exc:
                raise DatasetLayoutError(str(path / "dataset_dict.json"), f"unreadable ({exc})") \
                    from None
            out = []
            for s in splits:
                if not isinstance(s, str) or "/" in s or s.startswith("."):
                    raise DatasetLayoutError(str(path / "dataset_dict.json"),
                                             f"invalid split name {s!r}")
                out += self._parts_of_dir(path / s, s)
            return out
        return self._parts_of_dir(path, None)

    @staticmethod
    def _parts_of_dir(folder: Path, split: str | None) -> list[tuple[str | None, Path]]:
        state_split = None
        if (folder / "state.json").is_file():
            try:
                state_split = json.loads((folder / "state.json").read_text()).get("_split")
            except (OSError, ValueError, AttributeError):
                state_split = None
        files = sorted(folder.glob("*.arrow")) or sorted(folder.glob("**/*.parquet")) or [
            p for p in sorted(folder.glob("*.json*"))
            if p.name not in _META_FILES and _json_has_rows(p)]
        files = [f for f in files if f.is_file() and not f.is_symlink()]
        if not files:
            raise DatasetLayoutError(str(folder), "no .arrow, .parquet or .json data files")
        return [(split or (state_split if isinstance(state_split, str) else None)
                 or _split_from_name(str(f.relative_to(folder))), f) for f in files]


def _json_has_rows(path: Path) -> bool:
    head = head_bytes(path, 65536)
    return b'"images_path"' in head or (b'"impression"' in head and b'"findings"' in head
                                       and b'"section_findings"' not in head)


def _split_from_name(name: str) -> str | None:
    m = _SPLIT_IN_NAME.search(name)
    return m.group(1) if m else None


def _arrow_reader(path: Path) -> Any:  # pyarrow has no type information
    import pyarrow as pa

    try:
        return pa.ipc.open_stream(pa.memory_map(str(path)))  # what datasets writes
    except pa.ArrowInvalid:
        return pa.ipc.open_file(pa.memory_map(str(path)))


def _columns(path: Path, guard: Guard, parsed: JsonParts) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    guard.check(path)
    try:
        if path.suffix == ".parquet":
            return list(pq.ParquetFile(path).schema_arrow.names)
        if path.suffix == ".arrow":
            return list(_arrow_reader(path).schema.names)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetLayoutError(str(path), f"unreadable data file ({exc})") from None
    rows = parsed[path] = read_json_records(path, guard)
    names: set[str] = set()
    for _, r in rows[:100]:
        if isinstance(r, dict):
            names |= set(r)
    return sorted(names)


def _batches(path: Path, guard: Guard, parsed: JsonParts) -> Iterator[list[object]]:
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        for batch in pq.ParquetFile(path).iter_batches(batch_size=256):
            yield batch.to_pylist()
    elif path.suffix == ".arrow":
        for batch in _arrow_reader(path):
            yield batch.to_pylist()
    else:
        rows = parsed.pop(path, None)
        yield [r for _, r in (rows if rows is not None else read_json_records(path, guard))]


def _check_columns(path: Path, names: Iterable[str]) -> None:
    names = set(names)
    if "images" not in names and "images_path" not in names:
        raise DatasetLayoutError(str(path), "missing column(s) images or images_path; found: "
                                 + (", ".join(sorted(names)) or "none"))


def _record(row: object, split: str | None, raw_split: str | None, part: Path, row_no: int,
            images_root: Path, guard: Guard) -> StudyRecord:
    origin = f"{part}#row{row_no}"
    if not isinstance(row, dict):
        raise StudyLoadError(origin, f"row is a {type(row).__name__}, not an object")
    embedded = row.get("images") or []
    paths = row.get("images_path") or []
    if not isinstance(embedded, list) or not isinstance(paths, list):
        raise StudyLoadError(origin, "images/images_path are not lists")
    images: list[ImageSource] = []
    for i, item in enumerate(embedded):
        if isinstance(item, str):  # a JSON file before cast_column(Image()): just the path
            item = {"bytes": None, "path": item}
        if not isinstance(item, dict):
            raise StudyLoadError(origin, f"image {i} is a {type(item).__name__}")
        data = item.get("bytes")
        name = text(item.get("path")) or (paths[i] if i < len(paths) and isinstance(
            paths[i], str) else None) or f"{origin}/image{i}"
        if data:
            if not isinstance(data, bytes | bytearray):
                raise StudyLoadError(origin, f"image {i} bytes are a {type(data).__name__}")
            images.append(ImageSource(name=str(name), data=bytes(data)))
        else:
            rel = text(item.get("path")) or (paths[i] if i < len(paths) else None)
            if rel is None:
                raise StudyLoadError(origin, f"image {i} has neither bytes nor a path")
            file = guard.inside(images_root, rel, origin)
            images.append(ImageSource(name=str(file), path=str(file)))
    if not images:
        for p in paths:
            file = guard.inside(images_root, p, origin)
            images.append(ImageSource(name=str(file), path=str(file)))
    if not images:
        raise StudyLoadError(origin, "row has no images (neither images nor images_path)")
    first = paths[0] if paths and isinstance(paths[0], str) else None
    key = f"{_PREFIX}/{first}" if first else f"{_PREFIX}/{raw_split or 'all'}/{part.name}/{row_no}"
    subject = _MIMIC_SUBJECT.search(first or "")
    return StudyRecord(
        source=text(row.get("source")) or _PREFIX,
        study_key=key,
        patient_key=f"mimic-cxr/p{subject.group(1)}" if subject else key,
        origin=origin,
        split=split,
        split_raw=raw_split,
        images=tuple(images),
        reference=reference(row.get("findings"), row.get("impression")),
    )
