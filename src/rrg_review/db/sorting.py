"""Natural sort keys: CXR1, CXR2, ..., CXR10, CXR100 sort as a reader expects, in SQL.

The key is stored in `study.sort_key` so that ordering and paging stay one indexed query: every run
of digits is zero-padded to a fixed width and letters are lower-cased, so plain string order of
the keys is natural order of the originals.
"""

from __future__ import annotations

import re
from datetime import date, time

DIGITS = 12  # wider runs (e.g. 20-digit accession numbers) keep their own length and still sort
SORT_KEY_LENGTH = 255
_RUN = re.compile(r"\d+")


def study_sort_key(study_key: str, pseudonym: bool, study_date: date | None,
                   study_time: time | None) -> str:
    """A study's `sort_key`: its key in natural order, or for a key that is a pseudonym
    (random to a reader: a new-user trial's worklist came out in no order, a patient's study
    before its own prior) its date and time, oldest first, then the pseudonym."""
    if not pseudonym:
        return natural_key(study_key)
    when = f"{study_date.isoformat() if study_date else '9999-12-31'}" \
           f"t{study_time.isoformat() if study_time else '00:00:00'}"
    return f"{when} {study_key}"[:SORT_KEY_LENGTH]


def natural_key(text: str | None) -> str:
    """'CXR10_IM-0002' -> 'cxr000000000010_im-000000000002' (truncated to fit the column)."""
    def pad(match: re.Match[str]) -> str:
        run = match.group(0).lstrip("0") or "0"
        return run.rjust(DIGITS, "0")

    return _RUN.sub(pad, (text or "").lower())[:SORT_KEY_LENGTH]
