"""Reading the CSV/JSON metadata files of datasets, with errors that name file and column."""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from studies.errors import DatasetLayoutError


def find_file(root: Path, *names: str) -> Path | None:
    """The first of `names` (also tried with .gz) found in root or one level below."""
    for name in names:
        for candidate in (root / name, root / f"{name}.gz"):
            if candidate.is_file():
                return candidate
        for candidate in sorted(root.glob(f"*/{name}")) + sorted(root.glob(f"*/{name}.gz")):
            if candidate.is_file():
                return candidate
    return None


def _text(path: Path) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def read_csv(path: Path, required: Iterable[str]) -> Iterator[dict[str, str]]:
    """Rows of a CSV (optionally gzipped); a missing required column is a layout error."""
    try:
        with _text(path) as fh:
            reader = csv.DictReader(fh)
            columns = set(reader.fieldnames or ())
            missing = [c for c in required if c not in columns]
            if missing:
                raise DatasetLayoutError(
                    str(path), f"missing column(s) {', '.join(missing)}; found: "
                    + (", ".join(sorted(columns)) or "no header")
                )
            yield from reader
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DatasetLayoutError(str(path), f"cannot read CSV ({exc})") from exc


def read_json_records(path: Path) -> list[dict]:
    """A JSON list of objects, a dict of id -> object (id kept as '_key'), or JSON Lines."""
    try:
        with _text(path) as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetLayoutError(str(path), f"cannot read file ({exc})") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise DatasetLayoutError(str(path), f"neither JSON nor JSON Lines ({exc})") from exc
    if isinstance(data, dict):
        data = [{"_key": k, **v} for k, v in data.items() if isinstance(v, dict)]
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise DatasetLayoutError(str(path), "expected a list of objects or a mapping of objects")
    return data


def as_list(value: object) -> list[str]:
    """A list-valued metadata field that may come as a list, a JSON/Python list string or a str."""
    if value is None or value == "":
        return []
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text.replace("'", '"'))
            return [str(v) for v in parsed]
        except json.JSONDecodeError:
            pass
    return [text]
