"""Edit pairs as JSON lines (`{"id", "draft", "final"}`), read one line at a time so that a bad
line is reported with its number and the rest goes on, and a suggestion as its output line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rrg_review.metrics.findings.suggest import Suggestion

__all__ = ["BadLine", "EditPair", "read_edit_pairs", "suggestion_record"]


@dataclass(frozen=True)
class EditPair:
    line: int
    id: str
    draft: str
    final: str


@dataclass(frozen=True)
class BadLine:
    line: int
    reason: str


def read_edit_pairs(path: Path) -> Iterator[EditPair | BadLine]:
    """The pairs of a JSONL file, in order; blank lines skipped, a bad line as `BadLine`.

    Raises:
        OSError: the file cannot be opened (a problem of the whole input, not of a line).
    """
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            yield _parse(number, raw)


def _parse(number: int, raw: bytes) -> EditPair | BadLine:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BadLine(number, f"not UTF-8 (byte {exc.start + 1})")
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        return BadLine(number, f"not JSON ({exc.msg} at column {exc.colno})")
    if not isinstance(value, dict):
        return BadLine(number, "not a JSON object")
    missing = [k for k in ("id", "draft", "final") if k not in value]
    if missing:
        return BadLine(number, f"missing {', '.join(missing)}")
    key = value["id"]
    if not isinstance(key, str | int) or isinstance(key, bool):
        return BadLine(number, "id is not a string or a number")
    for field in ("draft", "final"):
        if not isinstance(value[field], str):
            return BadLine(number, f"{field} is not a string")
    return EditPair(number, str(key), value["draft"], value["final"])


def suggestion_record(pair_id: str, suggestion: Suggestion, draft: str,
                      final: str) -> dict[str, Any]:
    """The output line of one pair: counts per category and the spans they come from (with
    the sentence's text, so the file reads on its own)."""
    spans = []
    for e in suggestion.errors:
        spans.append({
            "category": e.category, "observation": e.observation, "reason": e.reason,
            "draft": list(e.draft) if e.draft else None,
            "final": list(e.final) if e.final else None,
            "draft_text": draft[e.draft[0]:e.draft[1]] if e.draft else None,
            "final_text": final[e.final[0]:e.final[1]] if e.final else None,
        })
    return {"id": pair_id, "errors": suggestion.counts(), "spans": spans}
