"""Reading predictions and references for `rrg-review score`.

JSONL files (`{"id", "findings", "impression"}` per line, optional "source") are matched by id,
as are .json files holding one array of such records or one object of id -> record;
plain text files (one report section per line, RRG24 submission style) are matched by line, split
as the reference scorer reads them: `open(...).readlines()` then `strip()` (lines end at \n, \r
or \r\n only; \x0b, \x0c, \x1c-\x1e, \x85, \u2028, \u2029 stay inside a line).
Mismatches are errors naming the file and the reason, never a silent truncation.

A reference with no text in the section is scored as an empty reference by default, as the
reference scorer does (`empty_references="score"`); `"skip"` leaves those pairs out and lists them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class PairsError(ValueError):
    pass


@dataclass(frozen=True)
class Pairs:
    ids: list[str]
    hyps: list[str]
    refs: list[str]
    sources: list[str] | None
    skipped: list[str]  # ids whose reference has no text in the section, left out ("skip")
    empty_references: list[str]  # ids whose reference has no text in the section, scored as ""


def _is_jsonl(path: Path) -> bool:
    return path.suffix.lower() in (".jsonl", ".json", ".ndjson")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PairsError(f"{path}: cannot read ({exc})") from exc


def _add(records: dict[str, dict[str, Any]], row: Any, where: str, section: str) -> None:
    """Check one record (`where` names the file and line or item) and keep it by its id."""
    if not isinstance(row, dict) or "id" not in row:
        raise PairsError(f"{where}: each record needs an object with an \"id\"")
    key = str(row["id"])
    if key in records:
        raise PairsError(f"{where}: duplicate id {key!r}")
    value = row.get(section)
    if value is not None and not isinstance(value, str):
        raise PairsError(f"{where}: {section!r} must be a string")
    records[key] = row


def _read_jsonl(path: Path, section: str, text: str | None = None) -> dict[str, dict[str, Any]]:
    records: dict[str, dict[str, Any]] = {}
    lines = (_read_text(path) if text is None else text).splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise PairsError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        _add(records, row, f"{path}:{number}", section)
    return records


def _read_json(path: Path, section: str) -> dict[str, dict[str, Any]]:
    """A .json file: one array of records, or one object of id -> record (the key is the id);
    a file of several JSON values (JSON Lines saved as .json) is read line by line."""
    text = _read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":  # more than one value: JSON Lines
            return _read_jsonl(path, section, text)
        raise PairsError(f"{path}:{exc.lineno}: not JSON ({exc.msg}, column {exc.colno})"
                         ) from exc
    records: dict[str, dict[str, Any]] = {}
    if isinstance(doc, list):
        for number, row in enumerate(doc, 1):
            _add(records, row, f"{path}: record {number}", section)
    elif isinstance(doc, dict) and "id" in doc and not isinstance(doc["id"], dict):
        _add(records, doc, f"{path}: record 1", section)  # a single record (one JSONL line)
    elif isinstance(doc, dict):
        for key, row in doc.items():
            if not isinstance(row, dict):
                raise PairsError(f"{path}: id {key!r} must map to an object with the sections")
            if "id" in row and str(row["id"]) != key:
                raise PairsError(f"{path}: id {key!r} holds a record with id {row['id']!r}")
            _add(records, {**row, "id": key}, f"{path}: id {key!r}", section)
    else:
        raise PairsError(f"{path}: a .json file must hold an array of records or an object "
                         f"of id -> record, not a {type(doc).__name__}")
    return records


def _read_records(path: Path, section: str) -> dict[str, dict[str, Any]]:
    return (_read_json if path.suffix.lower() == ".json" else _read_jsonl)(path, section)


EMPTY_REFERENCES = ("score", "skip")


def read_lines(path: Path) -> list[str]:
    """The reference scorer's reading: readlines() (universal newlines), each line stripped.

    Args:
        path: a UTF-8 text file, one report per line.

    Returns:
        The stripped lines (blank lines kept as "").

    Raises:
        PairsError: the file cannot be read or is not UTF-8; names the file.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            return [line.strip() for line in fh.readlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise PairsError(f"{path}: cannot read ({exc})") from exc


def read_pairs(predictions: str | Path, references: str | Path,
               section: str = "findings", empty_references: str = "score") -> Pairs:
    """Predictions and references matched for scoring from files: plain text line by line,
    or JSONL rows by id, so mismatched files are refused instead of scored against the wrong
    report.

    Args:
        predictions: the generated reports (.txt; .jsonl/.ndjson rows with an id; .json: an
            array of such rows or an object of id -> row).
        references: the references, in the same kind of file.
        section: for JSONL, the field scored ("findings" or "impression").
        empty_references: "score" (an empty reference is scored as "" and listed) or "skip"
            (left out and listed).

    Returns:
        ids (line numbers from 1 for text files), hypotheses, references, sources (JSONL
        only, None when no row names one), and the skipped and empty reference ids.

    Raises:
        PairsError: a bad `empty_references`, a missing file, one JSONL and one text file,
            text files of different lengths, an unreadable file, a JSONL line or .json record
            that is not an object with an id, a .json file that is neither an array nor an
            object of id -> record, a duplicate id, a non-string section, or JSONL ids present
            on one side only; the message names the file (and line).
    """
    if empty_references not in EMPTY_REFERENCES:
        raise PairsError(f"empty_references must be one of {', '.join(EMPTY_REFERENCES)}")
    skip = empty_references == "skip"
    pred, ref = Path(predictions), Path(references)
    for p in (pred, ref):
        if not p.is_file():
            raise PairsError(f"{p}: no such file")
    if _is_jsonl(pred) != _is_jsonl(ref):
        raise PairsError(f"{pred} and {ref}: both must be JSONL or both plain text")
    if not _is_jsonl(pred):
        hyps, refs = read_lines(pred), read_lines(ref)
        if len(hyps) != len(refs):
            raise PairsError(f"{pred} has {len(hyps)} lines but {ref} has {len(refs)}: "
                             "plain-text files are matched line by line")
        ids = [str(i + 1) for i in range(len(refs))]
        empty = [ids[i] for i in range(len(refs)) if not refs[i]]
        keep = [i for i in range(len(refs)) if refs[i] or not skip]
        return Pairs([ids[i] for i in keep], [hyps[i] for i in keep], [refs[i] for i in keep],
                     None, empty if skip else [], [] if skip else empty)
    hyp_rows, ref_rows = _read_records(pred, section), _read_records(ref, section)
    missing = [k for k in ref_rows if k not in hyp_rows]
    extra = [k for k in hyp_rows if k not in ref_rows]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} reference ids have no prediction (e.g. "
                         f"{', '.join(map(repr, missing[:3]))})")
        if extra:
            parts.append(f"{len(extra)} prediction ids have no reference (e.g. "
                         f"{', '.join(map(repr, extra[:3]))})")
        raise PairsError(f"{pred} vs {ref}: " + "; ".join(parts))
    ids, hyps, refs, sources, empty = [], [], [], [], []
    skipped: list[str] = []
    for key, row in ref_rows.items():
        text = (row.get(section) or "").strip()
        if not text:
            (skipped if skip else empty).append(key)
            if skip:
                continue
        ids.append(key)
        refs.append(text)
        hyps.append((hyp_rows[key].get(section) or "").strip())
        sources.append(str(row.get("source") or hyp_rows[key].get("source") or ""))
    return Pairs(ids, hyps, refs, sources if any(sources) else None, skipped, empty)
