"""Study dates as datasets write them: DICOM 'YYYYMMDD', ISO 'YYYY-MM-DD', or date-times."""

from __future__ import annotations

from datetime import date, datetime

from studies.errors import StudyLoadError


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
    for fmt in ("%Y%m%d", "%Y-%m-%d", "%Y/%m/%d", "%m/%d/%Y"):
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    try:
        return datetime.fromisoformat(text).date()
    except ValueError:
        raise StudyLoadError(origin, f"unreadable study date {text!r}") from None
