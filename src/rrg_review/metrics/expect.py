"""Parity with values produced elsewhere: `rrg-review score --expect FILE` compares this run's
per-pair values with expected ones (from the reference code run with the real weights) and reports
the largest difference per key, so a user with the weights proves parity in one command."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class ExpectError(ValueError):
    pass


@dataclass(frozen=True)
class KeyParity:
    key: str
    compared: int  # pairs with a value on both sides
    max_abs_diff: float
    worst_id: str | None
    missing: int  # expected ids this run has no value for


def read_expected(path: str | Path) -> dict[str, dict[str, float]]:
    """id -> key -> value. Accepts this tool's own output JSON (`{"per_sample": [{"id", key:
    value}]}`), a list of such rows, or a mapping id -> {key: value} (bare or under
    "per_sample").

    Args:
        path: the JSON file of expected per-sample values (e.g. a reference scorer's).

    Returns:
        pair id (as str) -> key -> value.

    Raises:
        ExpectError: the file cannot be read, is not JSON, has another shape, or holds a
            value that is not a number (booleans included; null is read as NaN, not
            computable); the message names the file.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ExpectError(f"{path}: cannot read ({exc})") from exc
    except json.JSONDecodeError as exc:
        raise ExpectError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from exc
    if isinstance(data, dict) and "per_sample" in data:
        data = data["per_sample"]
    rows: dict[str, dict[str, float]] = {}
    if isinstance(data, list):
        for number, row in enumerate(data, 1):
            if not isinstance(row, dict) or "id" not in row:
                raise ExpectError(f"{path}: row {number} needs an object with an \"id\"")
            rows[str(row["id"])] = {k: v for k, v in row.items() if k != "id"}
    elif isinstance(data, dict):
        for key, row in data.items():
            if not isinstance(row, dict):
                raise ExpectError(f"{path}: the value for id {key!r} must be an object")
            rows[str(key)] = dict(row)
    else:
        raise ExpectError(f"{path}: expected a list of rows or an object of ids")
    for pair_id, row in rows.items():
        for key, value in row.items():
            if value is None:  # null: not computable, as `rrg-review score` writes NaN
                row[key] = math.nan
            elif not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ExpectError(f"{path}: id {pair_id!r} key {key!r}: not a number")
    return rows


def compare(expected: Mapping[str, Mapping[str, float]], ids: Sequence[str],
            per_sample: Mapping[str, Sequence[float]]) -> list[KeyParity]:
    """Largest |this run - expected| per key present on both sides (NaN equals NaN; NaN on one
    side only is an infinite difference).

    Args:
        expected: pair id -> key -> expected value (`read_expected`).
        ids: this run's pair ids, in the order of `per_sample`.
        per_sample: key -> this run's value per pair.

    Returns:
        One parity per key present on both sides, sorted by key: pairs compared, the largest
        difference (0 with nothing compared) and its id, and expected ids this run lacks.
    """
    where = {pair_id: i for i, pair_id in enumerate(ids)}
    keys = sorted({k for row in expected.values() for k in row} & set(per_sample))
    out = []
    for key in keys:
        worst, worst_id, compared, missing = 0.0, None, 0, 0
        for pair_id, row in expected.items():
            if key not in row:
                continue
            if pair_id not in where:
                missing += 1
                continue
            got, want = float(per_sample[key][where[pair_id]]), float(row[key])
            if math.isnan(got) and math.isnan(want):
                diff = 0.0
            elif math.isnan(got) or math.isnan(want):
                diff = math.inf
            else:
                diff = abs(got - want)
            compared += 1
            if worst_id is None or diff > worst:
                worst, worst_id = diff, pair_id
        out.append(KeyParity(key, compared, worst, worst_id, missing))
    return out
