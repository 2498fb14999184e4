"""Reading the CSV/JSON metadata files of datasets, with errors that name file and column.

CSV is streamed row by row (gzip too); JSON is parsed once. Files are opened through the
import's Guard (regular files under the root only). Reading errors that happen after the header
(a truncated .gz, a bad byte in row 90,000) are raised as StudyLoadError naming the file, for
the importer to report while the rest of the dataset goes on.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.records import text
from rrg_review.studies.safety import Guard

# A CSV field may hold a whole report; the csv module's default limit is 128 KiB.
_CSV_FIELD_LIMIT = 16 << 20
_READ_ERRORS = (OSError, EOFError, UnicodeDecodeError, csv.Error, zlib.error, ValueError)


def find_file(root: Path, *names: str, depth: int = 1) -> Path | None:
    """The first of `names` (also tried with .gz) in root or up to `depth` levels below."""
    for name in names:
        for level in range(depth + 1):
            pattern = "*/" * level
            for candidate in sorted(root.glob(f"{pattern}{name}")) + sorted(
                    root.glob(f"{pattern}{name}.gz")):
                if candidate.is_file():
                    return candidate
    return None


def _text_stream(raw: BinaryIO, path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        raw = cast(BinaryIO, gzip.GzipFile(fileobj=raw, mode="rb"))
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")


def read_csv(path: Path, required: Iterable[str], guard: Guard) -> Iterator[dict[str, str]]:
    """Rows of a CSV (optionally gzipped), streamed.

    A missing required column is a DatasetLayoutError (raised before the first row); a reading
    error later is a StudyLoadError naming the file and the row.
    """
    csv.field_size_limit(_CSV_FIELD_LIMIT)
    raw = guard.open_metadata(path)
    row_no = 0
    try:
        with _text_stream(raw, path) as fh:
            try:
                reader = csv.DictReader(fh)
                columns = set(reader.fieldnames or ())
            except _READ_ERRORS as exc:
                raise DatasetLayoutError(str(path), f"cannot read CSV ({exc})") from None
            missing = [c for c in required if c not in columns]
            if missing:
                raise DatasetLayoutError(
                    str(path), f"missing column(s) {', '.join(missing)}; found: "
                    + (", ".join(sorted(c for c in columns if c)) or "no header")
                )
            try:
                for row in reader:
                    row_no += 1
                    yield row
            except _READ_ERRORS as exc:
                raise StudyLoadError(str(path), f"cannot read CSV after row {row_no} "
                                                f"({type(exc).__name__}: {exc})") from None
    finally:
        raw.close()


def csv_header(path: Path, guard: Guard) -> list[str]:
    """The column names of a CSV (for detection), or [] when unreadable."""
    try:
        raw = guard.open_metadata(path)
    except StudyLoadError:
        return []
    try:
        with _text_stream(raw, path) as fh:
            return next(csv.reader(fh), [])
    except _READ_ERRORS:
        return []
    finally:
        raw.close()


def load_json(path: Path, guard: Guard) -> object:
    """A JSON document (bare NaN tokens allowed, as pandas writes them) or JSON Lines."""
    raw = guard.open_metadata(path)
    try:
        with _text_stream(raw, path) as fh:
            content = fh.read()
    except _READ_ERRORS as exc:
        raise DatasetLayoutError(str(path), f"cannot read file ({type(exc).__name__}: {exc})") \
            from None
    finally:
        raw.close()
    try:
        return json.loads(content)
    except RecursionError:
        raise DatasetLayoutError(str(path), "JSON nested too deeply") from None
    except json.JSONDecodeError as first:
        try:
            return [json.loads(line) for line in content.splitlines() if line.strip()]
        except RecursionError:
            raise DatasetLayoutError(str(path), "JSON nested too deeply") from None
        except json.JSONDecodeError:
            raise DatasetLayoutError(str(path), f"neither JSON nor JSON Lines ({first})") \
                from None


def read_json_records(path: Path, guard: Guard) -> list[tuple[str | None, object]]:
    """(key, record) pairs of a JSON list, a dict keyed by id, or JSON Lines.

    Records are returned as found (non-objects included) so that the importer reports each bad
    one instead of dropping it silently.
    """
    data = load_json(path, guard)
    if isinstance(data, dict):
        return [(str(k), v) for k, v in data.items()]
    if isinstance(data, list):
        return [(None, v) for v in data]
    raise DatasetLayoutError(str(path), "expected a list of objects or a mapping of objects")


def head_bytes(path: Path, n: int = 65536) -> bytes:
    """The first bytes of a (possibly gzipped) regular file, for layout detection."""
    try:
        if not path.is_file() or path.is_symlink():
            return b""
        with open(path, "rb") as fh:
            head = fh.read(n)
        if path.suffix == ".gz":
            return zlib.decompressobj(31).decompress(head, n)
        return head
    except (OSError, zlib.error):
        return b""


def as_list(value: object) -> list[object]:
    """A list-valued metadata field that may come as a list, a JSON/Python list string or a str.

    Missing values (None, NaN, "nan") are an empty list; items keep their type (None/NaN
    items stay missing for the caller to normalise).
    """
    if isinstance(value, list | tuple):
        return list(value)
    single = text(value)
    if single is None:
        return []
    if single.startswith("["):
        try:
            parsed = json.loads(single.replace("'", '"'))
            if isinstance(parsed, list):
                return parsed
        except (json.JSONDecodeError, RecursionError):
            pass
    return [single]
