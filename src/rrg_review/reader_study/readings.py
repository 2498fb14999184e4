"""The long-format readings table of a reader study (one row per reading), loaded and checked.

A study run elsewhere, or simulated with known effects, is analysed from this table, so every
way it can be wrong gets one sentence naming the file, the column and the row, before any model
runs (the analysis never sees a half-valid table). Columns (README, "Reader studies: analysis"):

- required: `reader`, `case`, `arm`, `session`, `seconds` (active reading seconds);
- optional outcomes: `accepted` (0/1), `likert`, `words_changed`, `wer`, `errors_significant`,
  `errors_total`, `first_to_last_seconds` or the pair `first_keystroke_seconds` and
  `last_keystroke_seconds` (seconds from opening the reading; first-to-last = last - first),
  and metric columns `metric_<name>` (a metric of the final report against the reference);
- `signed` (0/1, true/false, yes/no, or the ISO 8601 time of signing; empty = unsigned):
  unsigned readings are excluded.

A reading whose `seconds` is empty or 0 has no time and is excluded with that reason; a
non-numeric or negative value is an error, not an exclusion (it means the table is broken).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

logger = logging.getLogger(__name__)

REQUIRED = ("reader", "case", "arm", "session", "seconds")
FIRST_TO_LAST = "first_to_last_seconds"
FIRST, LAST = "first_keystroke_seconds", "last_keystroke_seconds"
BINARY = ("accepted",)
CONTINUOUS = ("likert", "words_changed", "wer", "errors_significant", "errors_total")
# A value outside these is a broken table, not a reading: a Likert score of 99, or a reading
# time of 1e308 s (or 1e-300 s) that alone swung an arm's time ratio to 262 with a confidence
# interval of 0 to 1.4e8 on the log scale the model fits. Over a day of active reading is not a
# reading time; under 0.1 s is no reading (excluded, as 0 is).
READING_SECONDS = (0.0, 86_400.0)
SHORTEST_READING = 0.1  # seconds: less is excluded (a sign-off without a read), not an error
BOUNDS: dict[str, tuple[float, float]] = {"likert": (1.0, 5.0),
                                          FIRST_TO_LAST: (0.0, 86_400.0)}
BOUND_WHY = {"seconds": " seconds (at most 24 h of active reading)",
             "likert": " (the rating is a Likert score 1-5)",
             FIRST_TO_LAST: " seconds (at most 24 h)"}
WHOLE_NUMBERS = frozenset({"likert", "words_changed", "errors_significant", "errors_total"})
# pandas writes a missing value as "nan"; a session (a number or a short label) may also come
# as a spreadsheet's "#N/A", "NA", "null" or "None" (an arm or a reader may be called "NA")
MISSING_TEXT = frozenset({"nan"})
MISSING_SESSION = frozenset({"nan", "none", "null", "na", "n/a", "#n/a"})
SIGNED = "signed"
METRIC_PREFIX = "metric_"
TRUE = frozenset({"1", "true", "yes", "y", "t"})
FALSE = frozenset({"0", "false", "no", "n", "f", ""})

FloatArray = npt.NDArray[np.float64]
StrArray = npt.NDArray[np.str_]


class ReadingsError(ValueError):
    """A readings table that cannot be analysed; the message is the one sentence a user sees."""


@dataclass(frozen=True)
class Exclusion:
    """Readings left out of the analysis for one reason (count, and the first rows as examples
    so a study team can find them in their table)."""

    reason: str
    count: int
    rows: tuple[int, ...]

    def to_json(self) -> dict[str, Any]:
        return {"reason": self.reason, "count": self.count, "rows": list(self.rows)}


@dataclass(frozen=True)
class Readings:
    """The analysable readings, column by column (arrays, read-only), in table order.

    `outcomes` holds the optional numeric columns that were present (NaN where a reading has
    no value); `first_to_last` is NaN where the reading had no keystroke."""

    source: str
    reader: StrArray
    case: StrArray
    arm: StrArray
    session: StrArray
    seconds: FloatArray
    first_to_last: FloatArray | None
    outcomes: Mapping[str, FloatArray]
    excluded: tuple[Exclusion, ...]
    ignored_columns: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.seconds)

    @property
    def arms(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.arm.tolist())))

    @property
    def sessions(self) -> tuple[str, ...]:
        return sort_labels(set(self.session.tolist()))


def sort_labels(labels: set[str]) -> tuple[str, ...]:
    """Session labels in their natural order: numerically when they are all numbers (so that
    session 10 follows session 9), else as text."""
    try:
        return tuple(sorted(labels, key=float))
    except ValueError:
        return tuple(sorted(labels))


def load(path: Path) -> Readings:
    """Read a CSV (or Parquet, by its suffix) readings table and check it (ReadingsError)."""
    frame = _read_frame(path)
    return from_columns({str(c): [_text(v) for v in frame[c].tolist()] for c in frame.columns},
                        source=str(path), row_offset=1 if _is_parquet(path) else 2,
                        row_word="row" if _is_parquet(path) else "line")


def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() in (".parquet", ".pq")


def _read_frame(path: Path) -> Any:
    import pandas as pd

    if path.is_dir():
        raise ReadingsError(f"{path}: a folder, not a readings file")
    if not path.is_file():
        raise ReadingsError(f"{path}: no such readings file")
    try:
        if _is_parquet(path):
            try:
                import pyarrow  # noqa: F401  (pandas needs it for Parquet)
            except ImportError as exc:
                raise ReadingsError(f"{path}: reading Parquet needs pyarrow (pip install "
                                    "pyarrow), or give the table as CSV") from exc
            return pd.read_parquet(path)
        # utf-8-sig: a spreadsheet's byte-order mark must not become part of the first name
        return pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True,
                           encoding="utf-8-sig")
    except ReadingsError:
        raise
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ReadingsError(f"{path}: not a readable {'Parquet' if _is_parquet(path) else 'CSV'}"
                            f" table ({first})") from exc


def _text(value: Any) -> str:
    """A cell as text, as a CSV would hold it (Parquet's nulls and NaNs become empty)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool | np.bool_):
        return "1" if value else "0"
    return str(value).strip()


def from_columns(columns: Mapping[str, list[str]], source: str, row_offset: int = 2,
                 row_word: str = "line") -> Readings:
    """Check the text columns of a readings table and build the analysable Readings.

    `row_offset` turns a 0-based data row into the number a user sees (2 for a CSV line under
    its header; 1 for a Parquet row, counted from 1)."""
    names = {c.strip().lower(): c for c in columns}
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise ReadingsError(f"{source}: missing required column(s) {', '.join(missing)} (the "
                            f"table needs {', '.join(REQUIRED)}; it has "
                            f"{', '.join(columns) or 'none'})")
    col = {name: columns[original] for name, original in names.items()}
    n = len(col["reader"])
    if n == 0:
        raise ReadingsError(f"{source}: the table has no readings")

    def where(i: int) -> str:
        return f"{row_word} {i + row_offset}"

    _keys_given(col, source, where)
    _no_repeats(col, source, where)
    seconds = _numbers(col["seconds"], "seconds", source, where, allow_empty=True,
                       bounds=READING_SECONDS, zero_ok=True)
    keep = np.ones(n, dtype=bool)
    reasons: dict[str, list[int]] = {}

    def exclude(mask: npt.NDArray[np.bool_], reason: str) -> None:
        hit = mask & keep
        if hit.any():
            reasons[reason] = [int(i) + row_offset for i in np.flatnonzero(hit)]
            keep[hit] = False

    if SIGNED in col:
        signed = np.array([1.0 if _is_timestamp(v) else _flag(v, SIGNED, source, where, i)
                           for i, v in enumerate(col[SIGNED])], dtype=float)
        exclude(signed != 1, "unsigned reading")
    exclude(np.isnan(seconds) | (seconds == 0), "no reading time (seconds empty or 0)")
    exclude(seconds < SHORTEST_READING, f"reading time under {SHORTEST_READING:g} s")
    first_to_last = _first_to_last(col, source, where)
    outcomes: dict[str, FloatArray] = {}
    for name in BINARY:
        if name in col:
            outcomes[name] = np.array([_flag(v, name, source, where, i, empty=math.nan)
                                       for i, v in enumerate(col[name])], dtype=float)
    for name in (*CONTINUOUS, *sorted(c for c in col if c.startswith(METRIC_PREFIX))):
        if name in col:
            outcomes[name] = _numbers(col[name], name, source, where, allow_empty=True,
                                      allow_negative=name.startswith(METRIC_PREFIX),
                                      bounds=BOUNDS.get(name),
                                      whole=name in WHOLE_NUMBERS)
    known = {*REQUIRED, FIRST_TO_LAST, FIRST, LAST, *BINARY, *CONTINUOUS, SIGNED}
    ignored = tuple(sorted(names[c] for c in col
                           if c not in known and not c.startswith(METRIC_PREFIX)))
    excluded = tuple(Exclusion(reason, len(rows), tuple(rows[:10]))
                     for reason, rows in reasons.items())
    if not keep.any():
        raise ReadingsError(f"{source}: no reading is left to analyse ("
                            + "; ".join(f"{e.count} excluded: {e.reason}" for e in excluded)
                            + ")")
    readings = Readings(
        source=source,
        reader=_frozen(np.array(col["reader"], dtype=str)[keep]),
        case=_frozen(np.array(col["case"], dtype=str)[keep]),
        arm=_frozen(np.array(col["arm"], dtype=str)[keep]),
        session=_frozen(np.array(col["session"], dtype=str)[keep]),
        seconds=_frozen(seconds[keep]),
        first_to_last=None if first_to_last is None else _frozen(first_to_last[keep]),
        outcomes={k: _frozen(v[keep]) for k, v in outcomes.items()},
        excluded=excluded, ignored_columns=ignored)
    logger.info("%s: %d readings, %d excluded, arms %s", source, len(readings),
                n - len(readings), ", ".join(readings.arms))
    return readings


def _keys_given(col: Mapping[str, list[str]], source: str, where: Any) -> None:
    """Every reading names its reader, case, arm and session: an empty cell, or one as a
    spreadsheet or pandas writes it ("nan" became a session of its own), is refused."""
    for key in ("reader", "case", "arm", "session"):
        missing = MISSING_SESSION if key == "session" else MISSING_TEXT
        for i, value in enumerate(col[key]):
            if not value:
                raise ReadingsError(f"{source}: {where(i)}: column {key} is empty")
            if value.lower() in missing:
                raise ReadingsError(f"{source}: {where(i)}: column {key} is {value!r}, an "
                                    "empty cell as a spreadsheet or pandas writes it")


def _no_repeats(col: Mapping[str, list[str]], source: str, where: Any) -> None:
    """A reader reads a case once per session: a repeated (reader, case, session) is a table
    joined or exported twice, which would silently double-weight those readings."""
    seen: dict[tuple[str, str, str], int] = {}
    for i, key in enumerate(zip(col["reader"], col["case"], col["session"], strict=True)):
        if key in seen:
            raise ReadingsError(f"{source}: {where(i)}: reader {key[0]!r} reads case {key[1]!r} "
                                f"in session {key[2]!r} again (first at {where(seen[key])})")
        seen[key] = i


def _frozen(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    array.setflags(write=False)
    return array


def _numbers(values: list[str], name: str, source: str, where: Any, allow_empty: bool,
             allow_negative: bool = False, bounds: tuple[float, float] | None = None,
             whole: bool = False, zero_ok: bool = False) -> FloatArray:
    """The column as numbers (empty: NaN where allowed); anything else that is not a finite
    number, negative (unless allowed), outside `bounds` or, for a count (`whole`), not a whole
    number is one sentence naming the row. `zero_ok`: 0 passes the bounds (a reading time of 0
    is an exclusion the caller makes, not an error)."""
    out = np.empty(len(values), dtype=float)
    for i, value in enumerate(values):
        if not value:
            if not allow_empty:
                raise ReadingsError(f"{source}: {where(i)}: column {name} is empty")
            out[i] = math.nan
            continue
        try:
            number = float(value)
        except ValueError:
            raise ReadingsError(f"{source}: {where(i)}: column {name} is {value!r}, not a "
                                "number") from None
        if not math.isfinite(number):
            raise ReadingsError(f"{source}: {where(i)}: column {name} is {value!r}, not a "
                                "finite number")
        if number < 0 and not allow_negative:
            raise ReadingsError(f"{source}: {where(i)}: column {name} is {value}, a negative "
                                f"{'time' if 'seconds' in name else 'value'}")
        if whole and not number.is_integer():
            raise ReadingsError(f"{source}: {where(i)}: column {name} is {value}, not a whole "
                                "number")
        if (bounds is not None and not (zero_ok and number == 0)
                and not bounds[0] <= number <= bounds[1]):
            raise ReadingsError(f"{source}: {where(i)}: column {name} is {value}, outside "
                                f"{bounds[0]:g} to {bounds[1]:g}{BOUND_WHY.get(name, '')}")
        out[i] = number
    return out


def _flag(value: str, name: str, source: str, where: Any, i: int,
          empty: float = 0.0) -> float:
    text = value.strip().lower()
    if text == "":
        return empty
    if text in TRUE:
        return 1.0
    if text in FALSE:
        return 0.0
    try:  # a numeric column (Parquet, spreadsheets) holds 1.0 and 0.0
        number = float(text)
    except ValueError:
        number = math.nan
    if number in (0.0, 1.0):
        return number
    raise ReadingsError(f"{source}: {where(i)}: column {name} is {value!r}, not 0/1 "
                        "(or true/false, yes/no)")


def _is_timestamp(value: str) -> bool:
    """A signing time (ISO 8601, as a database export writes it) means signed."""
    from datetime import datetime

    if len(value) < 10:  # not a date: leaves "1", "0", "yes" to _flag
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


def _first_to_last(col: Mapping[str, list[str]], source: str, where: Any) -> FloatArray | None:
    """First-to-last keystroke seconds: the given column, else last - first keystroke."""
    if FIRST_TO_LAST in col:
        return _numbers(col[FIRST_TO_LAST], FIRST_TO_LAST, source, where, allow_empty=True,
                        bounds=BOUNDS[FIRST_TO_LAST])
    if (FIRST in col) != (LAST in col):
        have, lacks = (FIRST, LAST) if FIRST in col else (LAST, FIRST)
        raise ReadingsError(f"{source}: column {have} needs column {lacks} (first-to-last "
                            f"keystroke time is {LAST} - {FIRST})")
    if FIRST not in col:
        return None
    first = _numbers(col[FIRST], FIRST, source, where, allow_empty=True)
    last = _numbers(col[LAST], LAST, source, where, allow_empty=True)
    backwards = np.flatnonzero(last < first)
    if len(backwards):
        i = int(backwards[0])
        raise ReadingsError(f"{source}: {where(i)}: {LAST} ({last[i]:g}) is before {FIRST} "
                            f"({first[i]:g})")
    return last - first
