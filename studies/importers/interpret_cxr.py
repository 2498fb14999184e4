"""interpret-cxr, the RRG24 Hugging Face layout: rows with `source`, `findings`, `impression` and
`images` (embedded image structs {bytes, path}) and/or `images_path` (paths relative to the
dataset folder or the --images root). Read from a `datasets.save_to_disk` folder (Arrow files, a
single split or a DatasetDict with one folder per split), Parquet files, or JSON/JSON Lines.

The rows carry no study or patient ids: a study is keyed by its first image path when there is
one, else by split and row number; each study is its own patient. `Study.source` keeps the row's
`source` (MIMIC-CXR, CheXpert, PadChest, BIMCV-COVID19, OpenI) so scores break down per dataset.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from studies.errors import DatasetLayoutError
from studies.importers.base import ImportOptions
from studies.importers.tables import read_json_records
from studies.records import ImageSource, ReportSections, StudyRecord
from studies.reports import clean

REQUIRED = ("findings", "impression")
_PREFIX = "interpret-cxr"


class InterpretCxrImporter:
    name = "interpret-cxr"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        if path.is_dir():
            if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
                return True
            return any(path.glob("*.parquet")) or any(path.glob("*/*.parquet"))
        return path.suffix == ".parquet" or (
            path.suffix in (".json", ".jsonl") and _json_head_has(path, b'"impression"')
        )

    def count(self, path: Path) -> int | None:
        return sum(n for _, _, n in self._parts(path))

    def read(self, path: Path) -> Iterator[StudyRecord]:
        base = path if path.is_dir() else path.parent
        images_root = self.options.images or base
        for split, part, _ in self._parts(path):
            row_no = 0
            for batch in _batches(part):
                for row in batch:
                    yield _record(row, split, part, row_no, images_root)
                    row_no += 1

    def _parts(self, path: Path) -> list[tuple[str | None, Path, int]]:
        """(split, file, rows) for every data file, splits named by their folder/file names."""
        if path.is_file():
            return [(_split_from_name(path.stem), path, _rows(path))]
        if (path / "dataset_dict.json").is_file():
            splits = json.loads((path / "dataset_dict.json").read_text()).get("splits", [])
            return [p for s in splits for p in self._parts_of_dir(path / s, s)]
        return self._parts_of_dir(path, None)

    @staticmethod
    def _parts_of_dir(folder: Path, split: str | None) -> list[tuple[str | None, Path, int]]:
        files = sorted(folder.glob("*.arrow")) or sorted(folder.glob("**/*.parquet")) or sorted(
            folder.glob("*.json*")
        )
        files = [f for f in files if f.name not in ("state.json", "dataset_info.json")]
        if not files:
            raise DatasetLayoutError(str(folder), "no .arrow, .parquet or .json data files")
        return [(split or _split_from_name(f.stem), f, _rows(f)) for f in files]


def _json_head_has(path: Path, needle: bytes) -> bool:
    with open(path, "rb") as fh:
        return needle in fh.read(65536)


def _split_from_name(stem: str) -> str | None:
    for split in ("train", "validation", "valid", "val", "test"):
        if stem.startswith(split) or f"/{split}" in stem or f"{split}-" in stem:
            return {"validation": "valid", "val": "valid"}.get(split, split)
    return None


def _arrow_reader(path: Path):
    import pyarrow as pa

    try:
        return pa.ipc.open_stream(pa.memory_map(str(path)))  # what save_to_disk writes
    except pa.ArrowInvalid:
        return pa.ipc.open_file(pa.memory_map(str(path)))


def _rows(path: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.suffix == ".parquet":
            return pq.ParquetFile(path).metadata.num_rows
        if path.suffix == ".arrow":
            return sum(b.num_rows for b in _arrow_reader(path))
    except (pa.ArrowException, OSError) as exc:
        raise DatasetLayoutError(str(path), f"unreadable data file ({exc})") from exc
    return len(read_json_records(path))


def _batches(path: Path) -> Iterator[list[dict]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.suffix == ".parquet":
            source = pq.ParquetFile(path).iter_batches(batch_size=256)
        elif path.suffix == ".arrow":
            source = iter(_arrow_reader(path))
        else:
            records = read_json_records(path)
            _check_columns(path, records[0].keys() if records else REQUIRED)
            yield records
            return
        for batch in source:
            _check_columns(path, batch.schema.names)
            yield batch.to_pylist()
    except pa.ArrowException as exc:
        raise DatasetLayoutError(str(path), f"unreadable data file ({exc})") from exc


def _check_columns(path: Path, names) -> None:
    names = set(names)
    missing = [c for c in REQUIRED if c not in names]
    if "images" not in names and "images_path" not in names:
        missing.append("images or images_path")
    if missing:
        raise DatasetLayoutError(str(path), f"missing column(s) {', '.join(missing)}")


def _record(row: dict, split: str | None, part: Path, row_no: int, images_root: Path):
    images: list[ImageSource] = []
    embedded = row.get("images") or []
    paths = [str(p) for p in (row.get("images_path") or [])]
    for i, item in enumerate(embedded):
        data = item.get("bytes") if isinstance(item, dict) else None
        name = (item.get("path") if isinstance(item, dict) else None) or (
            paths[i] if i < len(paths) else f"{part}#row{row_no}/image{i}"
        )
        if data:
            images.append(ImageSource(name=str(name), data=bytes(data)))
    if not images:
        for p in paths:
            file = images_root / p
            images.append(ImageSource(name=str(file), path=str(file)))
    key = f"{_PREFIX}/{paths[0]}" if paths else f"{_PREFIX}/{split or 'all'}/{part.name}/{row_no}"
    return StudyRecord(
        source=str(row.get("source") or _PREFIX),
        study_key=key,
        patient_key=key,
        origin=f"{part}#row{row_no}",
        split=split,
        images=tuple(images),
        reference=ReportSections(clean(row.get("findings")), clean(row.get("impression"))),
    )
