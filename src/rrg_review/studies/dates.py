"""Study dates as datasets write them: DICOM 'YYYYMMDD', ISO 'YYYY-MM-DD', or date-times."""

from __future__ import annotations

from datetime import date, datetime, time

from rrg_review.studies.errors import StudyLoadError


def parse_date(value: object, origin: str) -> date | None:
    if value is None or value == "" or (isinstance(value, float) and value != value):
        return None
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    text = str(value).strip()
    if text.endswith(".0"):
        text = text[:-2]  # 20040826.0 from numeric CSV columns
    if len(text) == 8 and text.isdigit():  # the common case, without strptime's cost
        try:
            return date(int(text[:4]), int(text[4:6]), int(text[6:]))
        except ValueError:
            raise StudyLoadError(origin, f"unreadable study date {text!r}") from None
    for fmt in ("%Y%m%d", "%Y-%m-%d", "%Y/%m/%d", "%m/%d/%Y"):
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    try:
        return datetime.fromisoformat(text).date()
    except ValueError:
        raise StudyLoadError(origin, f"unreadable study date {text!r}") from None


def parse_time(value: object, numeric: bool = False) -> time | None:
    """DICOM TM (HHMMSS.frac, HHMM, HH) or, with `numeric`, a time written as a number whose
    leading zeros were lost (MIMIC's StudyTime '84505.328' = 08:45:05.328, '1200' = 00:12:00).
    None when missing or not a time of day."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    raw = str(value).strip().replace(":", "")
    whole, _, frac = raw.partition(".")
    if not whole.isdigit() or not 1 <= len(whole) <= 6:
        return None
    if numeric:
        whole = whole.zfill(6)
    else:
        whole = {2: whole + "0000", 4: whole + "00"}.get(len(whole), whole.zfill(6))
    hh, mm, ss = int(whole[:2]), int(whole[2:4]), int(whole[4:6])
    if hh > 23 or mm > 59 or ss > 59:
        return None
    micro = int((frac + "000000")[:6]) if frac.isdigit() else 0
    return time(hh, mm, ss, micro)
