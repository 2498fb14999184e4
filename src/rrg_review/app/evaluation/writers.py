"""Writers of an `Evaluation`: JSON (everything), CSV (one row per review row, with the metric
and ReXVal columns flattened), RRG24-style prediction files, and the file-name and CSV-cell
safety they share. The HTML writer is `report_html`."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rrg_review.app.evaluation.results import Evaluation, ReviewRow
from rrg_review.core.vocabulary import ERROR_KINDS, REXVAL_CATEGORIES

CSV_FIELDS = ["study_key", "source", "split", "section", "preset", "model_id", "model_revision",
              "reader", "draft", "final", "reference", "likert", "acceptable", "comment",
              "active_seconds", "rated_at"]
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def flat_row(row: ReviewRow) -> dict[str, Any]:
    """A row as one flat record: its fields, `<category>_<kind>` error counts and
    `<comparison>.<metric key>` values (no study id: exports never carry database ids).

    Args:
        row: one review row.

    Returns:
        field -> value; error counts are None when the row has no rating errors.
    """
    out = {k: getattr(row, k) for k in CSV_FIELDS}
    for category in REXVAL_CATEGORIES:
        for kind in ERROR_KINDS:
            out[f"{category}_{kind}"] = (row.errors.get(category) or {}).get(kind) \
                if row.errors else None
        out[f"{category}_suggested"] = (row.suggested.get(category)
                                        if row.suggested is not None else None)
    for comparison, values in row.metrics.items():
        for key, value in values.items():
            out[f"{comparison}.{key}"] = value
    return out


def evaluation_json(evaluation: Evaluation) -> dict[str, Any]:
    """Everything the evaluation holds, as JSON-ready data.

    Args:
        evaluation: the computed evaluation.

    Returns:
        A dict of plain values (dates and other objects are left for `json.dumps`'s
        `default=str`, as `json_text` does).
    """
    return {
        "generated_at": evaluation.generated_at,
        "filters": evaluation.filters,
        "rows": [flat_row(r) | {"errors": r.errors} for r in evaluation.rows],
        "models": [asdict(m) for m in evaluation.models],
        "sources": evaluation.sources,
        "readers": list(evaluation.readers),
        "automatic": [asdict(a) for a in evaluation.automatic],
        "paired": [{"section": p.section, "model_a": p.model_a, "model_b": p.model_b,
                    **asdict(p.result)} for p in evaluation.paired],
        "unavailable": evaluation.unavailable,
        "review": asdict(evaluation.review),
        "edits": [asdict(e) for e in evaluation.edits],
        "metric_agreement": [asdict(a) for a in evaluation.metric_agreement],
        "reader_agreement": [asdict(a) for a in evaluation.reader_agreement],
        "suggestion_agreement": [asdict(a) for a in evaluation.suggestion_agreement],
        "flag_outcomes": [asdict(f) | {"precision": f.precision, "recall": f.recall}
                          for f in evaluation.flag_outcomes],
        "cases": {c.title: [flat_row(r) for r in c.rows] for c in evaluation.cases},
    }


def json_ready(value: Any) -> Any:
    """`value` with every NaN or infinite float (a metric that was not computable) replaced by
    None, in nested dicts, lists and tuples: JSON has no NaN, and `json.dumps` would write a
    bare `NaN` token that strict parsers refuse.

    Args:
        value: plain data (dicts, lists, tuples, numbers, text).

    Returns:
        The same data with non-finite floats as None (tuples become lists).
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


def json_text(evaluation: Evaluation) -> str:
    """The JSON export.

    Args:
        evaluation: the computed evaluation.

    Returns:
        `evaluation_json` as indented, strictly valid JSON text: values JSON cannot hold are
        written as str, a NaN or infinite number (not computable) as null.
    """
    return json.dumps(json_ready(evaluation_json(evaluation)), indent=2, default=str,
                      allow_nan=False)


def neutralise_cell(value: Any) -> Any:
    """OWASP's defence against CSV injection: a text cell starting with = + - @ tab or CR is
    prefixed with a single quote, so a spreadsheet shows it as text instead of running it.
    (Every text cell is also quoted, and embedded quotes doubled, by the csv writer.)

    Args:
        value: a cell's value.

    Returns:
        The value, with a leading ' when it is a text starting with a formula character;
        anything else (numbers, None) unchanged.
    """
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_text(evaluation: Evaluation) -> str:
    """The rows as CSV, every cell neutralised (header included).

    Args:
        evaluation: the computed evaluation.

    Returns:
        CSV text, one line per review row (a NaN metric value, not computable, is an empty
        cell); with no rows, only the header of CSV_FIELDS.
    """
    flat = [{k: None if isinstance(v, float) and math.isnan(v) else neutralise_cell(v)
             for k, v in flat_row(r).items()} for r in evaluation.rows]
    fields = list(dict.fromkeys(k for row in flat for k in row)) or CSV_FIELDS
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=[neutralise_cell(f) for f in fields],
                            quoting=csv.QUOTE_NONNUMERIC)
    writer.writeheader()
    writer.writerows({neutralise_cell(k): v for k, v in row.items()} for row in flat)
    return buf.getvalue()


def safe_name(text: str, fallback: str = "export") -> str:
    """A file-name part from free text (a preset name, a stem): no separators, no `..`,
    no leading dot, at most 64 characters.

    Args:
        text: the free text.
        fallback: what to use when nothing usable is left.

    Returns:
        Runs of anything but letters, digits, ".", "_" and "-" replaced by "_", leading and
        trailing "." and "_" stripped, cut to 64 characters; `fallback` if that is empty.
    """
    cleaned = _UNSAFE_NAME.sub("_", text).strip("._")[:64]
    return cleaned or fallback


def prediction_files(evaluation: Evaluation, folder: Path, stem: str) -> dict[Path, str]:
    """RRG24-style files: `<stem>.<model>.<section>.txt`, one generated section per line, in
    the order of `<stem>.<model>.<section>.ids.txt` (studies sorted by source, study key).

    Args:
        evaluation: the computed evaluation (one draft per model, section and study is used:
            rows of several readers repeat it).
        folder: where the files go.
        stem: the report's file stem (made safe).

    Returns:
        path -> text, not yet written; whitespace inside a draft (newlines too) becomes
        single spaces so each draft is one line. Empty when there are no rows.
    """
    unique: dict[tuple[str, str], dict[tuple[str, str], str]] = defaultdict(dict)
    for r in evaluation.rows:
        unique[(r.preset, r.section)][(r.source, r.study_key)] = r.draft
    out: dict[Path, str] = {}
    for (preset, section), texts in sorted(unique.items()):
        order = sorted(texts)
        base = folder / f"{safe_name(stem)}.{safe_name(preset, 'model')}.{section}"
        out[Path(f"{base}.txt")] = "\n".join(" ".join(texts[k].split()) for k in order) + "\n"
        out[Path(f"{base}.ids.txt")] = "\n".join(f"{s}/{k}" for s, k in order) + "\n"
    return out
