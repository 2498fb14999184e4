"""Text-edit measures of a reader's final report against the model's draft: the word error rate
(the evaluation's "how much was changed") and the word-level diff (what the review page shows).

They sit with the metrics, below the application, because both the review page and the export
pipeline read them; in the review service they made the export import the review service and
the review service the export (an import circle).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

__all__ = ["DiffPiece", "word_diff", "word_error_rate"]


@dataclass(frozen=True)
class DiffPiece:
    op: str  # "equal" | "delete" | "insert"
    text: str


def word_diff(before: str, after: str) -> list[DiffPiece]:
    """Word-level diff (difflib on whitespace tokens) of draft vs current text, so the reader
    sees what they changed in the model's words.

    Args:
        before: the draft text.
        after: the reader's current text.

    Returns:
        Pieces in reading order; a replaced run is a "delete" piece then an "insert" piece.
        Whitespace is not kept (pieces are words joined by single spaces); two empty texts
        give an empty list.
    """
    a, b = before.split(), after.split()
    out: list[DiffPiece] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag in ("equal", "delete", "replace") and i2 > i1:
            out.append(DiffPiece("equal" if tag == "equal" else "delete", " ".join(a[i1:i2])))
        if tag in ("insert", "replace") and j2 > j1:
            out.append(DiffPiece("insert", " ".join(b[j1:j2])))
    return out


def word_error_rate(draft: str, final: str) -> float:
    """The standard word error rate of the reader's final text against the model's draft:
    (substituted + deleted + inserted words) / words of the draft, from rapidfuzz's word-level
    Levenshtein distance. 0 means accepted as is; a replaced word counts once (not as a
    delete plus an insert). An empty draft counts as one word, so writing a report from
    nothing is its word count rather than a division by zero.

    Args:
        draft: the model's text (the reference of the rate).
        final: the reader's text (the hypothesis).
    Returns:
        The rate, 0 or more (above 1 when the reader wrote more than the draft had).
    """
    from rapidfuzz.distance import Levenshtein

    words = draft.split()
    return float(Levenshtein.distance(words, final.split())) / max(1, len(words))
