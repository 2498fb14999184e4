"""Natural sort keys: CXR1, CXR2, ..., CXR10, CXR100 sort as a reader expects, in SQL.

The key is stored in `study.sort_key` so that ordering and paging stay one indexed query: every run
of digits is zero-padded to a fixed width and letters are lower-cased, so plain string order of
the keys is natural order of the originals.
"""

from __future__ import annotations

import re

DIGITS = 12  # wider runs (e.g. 20-digit accession numbers) keep their own length and still sort
SORT_KEY_LENGTH = 255
_RUN = re.compile(r"\d+")


def natural_key(text: str | None) -> str:
    """'CXR10_IM-0002' -> 'cxr000000000010_im-000000000002' (truncated to fit the column)."""
    def pad(match: re.Match[str]) -> str:
        run = match.group(0).lstrip("0") or "0"
        return run.rjust(DIGITS, "0")

    return _RUN.sub(pad, (text or "").lower())[:SORT_KEY_LENGTH]
