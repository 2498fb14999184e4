"""Which reader reads which case under which arm, in which session and order: made from the
seed alone, balanced like a Latin square.

Readers, cases and arms are each put in a seeded order, and reader r (its place in that order)
reads case c (its place) under arm `(r + c) mod A` for a parallel design; in a crossover,
sequence `(r + c) mod A` of a Latin square gives the arm of each session (a Williams square
for an even number of arms, so carry-over from one arm to the next is balanced too; the
cyclic square `(r + c + session) mod A` for an odd number). Consequences, checked by tests
over many seeds and sizes:
- every reader reads every case once (parallel) or once per session (crossover), and in a
  crossover the arm of a case changes from one session to the next;
- per reader and session the arms differ by at most one case, and since every reader's counts
  are the same rotations of one set of numbers, every cell of the readers x arms x sessions
  balance table is within +-1 of every other, whether or not the sizes divide evenly;
- per case (and session) the arms are spread over the readers within +-1 as well.
A parallel design with several sessions spreads each reader's cases of each arm over the
sessions in turn (starting at a session that rotates with the arm), keeping the same +-1.
Case order within a reader's session is its own seeded shuffle.

"Seeded order" is a sort by SHA-256 of (seed, purpose, item), not a library RNG, so a stored
study can be re-derived from its seed by anyone, with any Python or NumPy version: the same
seed and the same readers, cases and arms give the same allocation, whatever order the file
listed them in.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Allocated:
    """One reading to be done: (reader, case, arm, session, order within the reader's session;
    session and order count from 1)."""

    reader: str
    case: str
    arm: str
    session: int
    order: int


@dataclass(frozen=True)
class BalanceTable:
    """How many readings each reader has under each arm in each session."""

    readers: tuple[str, ...]
    arms: tuple[str, ...]
    sessions: int
    counts: tuple[tuple[tuple[int, ...], ...], ...]  # [reader][arm][session - 1]

    @property
    def cells(self) -> list[int]:
        return [n for per_reader in self.counts for per_arm in per_reader for n in per_arm]

    @property
    def spread(self) -> int:
        """Largest minus smallest cell (balanced: at most 1)."""
        cells = self.cells
        return max(cells) - min(cells) if cells else 0

    def count(self, reader: str, arm: str, session: int) -> int:
        return self.counts[self.readers.index(reader)][self.arms.index(arm)][session - 1]

    def to_json(self) -> dict[str, Any]:
        return {"readers": list(self.readers), "arms": list(self.arms),
                "sessions": self.sessions,
                "counts": [[list(per_arm) for per_arm in per_reader]
                           for per_reader in self.counts]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> BalanceTable:
        return cls(tuple(raw["readers"]), tuple(raw["arms"]), int(raw["sessions"]),
                   tuple(tuple(tuple(int(n) for n in per_arm) for per_arm in per_reader)
                         for per_reader in raw["counts"]))

    def render(self, labels: dict[str, str] | None = None) -> str:
        """A text table: one row per reader, one column per arm and session (arms shown by
        `labels[arm]` when given, e.g. blinded codes, and then in the labels' order)."""
        names = [(labels or {}).get(arm, arm) for arm in self.arms]
        columns = sorted(range(len(self.arms)), key=lambda a: names[a]) if labels else \
            list(range(len(self.arms)))
        heads = [f"{names[a]} s{s}" for a in columns for s in range(1, self.sessions + 1)]
        width = max([len(r) for r in self.readers] + [6])
        lines = ["reader".ljust(width) + "  " + "  ".join(heads)]
        for reader, per_reader in zip(self.readers, self.counts, strict=True):
            counts = [per_reader[a][s] for a in columns for s in range(self.sessions)]
            cells = [str(n).rjust(len(h)) for h, n in zip(heads, counts, strict=True)]
            lines.append(reader.ljust(width) + "  " + "  ".join(cells))
        lines.append(f"spread (largest - smallest cell): {self.spread}")
        return "\n".join(lines)


@dataclass(frozen=True)
class StudyAllocation:
    readings: tuple[Allocated, ...]
    balance: BalanceTable
    arm_codes: tuple[tuple[str, str], ...]  # (arm, blinded code "A", "B", ...) in code order

    def to_json(self) -> str:
        """The allocation as compact JSON (what a re-derivation is compared against)."""
        return json.dumps([[a.reader, a.case, a.arm, a.session, a.order]
                           for a in self.readings], separators=(",", ":"))


def seeded_order(items: Iterable[str], seed: int, purpose: str) -> list[str]:
    """`items` in an order fixed by the seed and the purpose alone (a sort by SHA-256)."""
    def rank(item: str) -> bytes:
        return hashlib.sha256(f"{seed}\x1f{purpose}\x1f{item}".encode()).digest()

    return sorted(items, key=rank)


def allocate(readers: Sequence[str], cases: Sequence[str], arms: Sequence[str], *,
             design: str, sessions: int, seed: int) -> StudyAllocation:
    """The readings of a study.

    Args:
        readers: account names (distinct).
        cases: case identities (distinct; stable across databases, e.g. "source:key").
        arms: arm specs (distinct), e.g. "unassisted", "draft:rrg24-baseline".
        design: "parallel" or "crossover".
        sessions: number of sessions (a crossover: at least 2).
        seed: the allocation's seed.

    Raises:
        ValueError: an empty or repeated list, or a design these sizes do not allow.
    """
    for what, items in (("readers", readers), ("cases", cases), ("arms", arms)):
        if not items or len(set(items)) != len(items):
            raise ValueError(f"the {what} must be a non-empty list without repeats")
    if design not in ("parallel", "crossover") or sessions < 1 or (
            design == "crossover" and (sessions < 2 or len(arms) < 2)):
        raise ValueError(f"a {design} design with {sessions} sessions and {len(arms)} arms "
                         "cannot be allocated")
    reader_order = seeded_order(readers, seed, "readers")
    case_order = seeded_order(cases, seed, "cases")
    arm_order = seeded_order(arms, seed, "arms")
    place = {case: i for i, case in enumerate(case_order)}
    n_arms = len(arm_order)
    cells: dict[tuple[str, int], list[tuple[str, str]]] = {}  # (reader, session) -> cases, arms
    for r, reader in enumerate(reader_order):
        if design == "crossover":
            for s in range(sessions):
                cells[(reader, s + 1)] = [(c, arm_order[_crossover_arm(r + place[c], s,
                                                                       n_arms)])
                                          for c in case_order]
        else:
            for s in range(sessions):
                cells[(reader, s + 1)] = []
            for a, arm in enumerate(arm_order):
                mine = [c for c in case_order if (r + place[c]) % n_arms == a]
                for i, case in enumerate(mine):
                    cells[(reader, (i + a) % sessions + 1)].append((case, arm))
    readings: list[Allocated] = []
    for (reader, session), work in cells.items():
        arm_of = dict(work)
        ordered = seeded_order(arm_of, seed, f"order\x1f{reader}\x1f{session}")
        readings.extend(Allocated(reader, case, arm_of[case], session, i + 1)
                        for i, case in enumerate(ordered))
    readings.sort(key=lambda a: (readers.index(a.reader), a.session, a.order))
    codes = tuple((arm, _code(i)) for i, arm in enumerate(arm_order))
    return StudyAllocation(tuple(readings), balance_of(readings, readers, arms, sessions),
                           codes)


def _crossover_arm(row: int, session: int, n_arms: int) -> int:
    """The arm (index) of sequence `row` in `session` (from 0). With an even number of arms the
    sequences are the rows of a Williams square (first row 0, 1, n-1, 2, n-2, ...; row k adds
    k), so every arm follows every other arm equally often and first-order carry-over is
    balanced as well; with an odd number the plain cyclic square (a Williams design would need
    2n sequences, and the +-1 cell balance would no longer hold for case counts that are not a
    multiple of 2n). With two arms both are AB / BA."""
    row, column = row % n_arms, session % n_arms
    if n_arms % 2:
        return (row + column) % n_arms
    first = 0 if column == 0 else (column + 1) // 2 if column % 2 else n_arms - column // 2
    return (first + row) % n_arms


def balance_of(readings: Iterable[Allocated], readers: Sequence[str], arms: Sequence[str],
               sessions: int) -> BalanceTable:
    """Count readings per reader, arm and session."""
    counts = [[[0] * sessions for _ in arms] for _ in readers]
    r_index = {r: i for i, r in enumerate(readers)}
    a_index = {a: i for i, a in enumerate(arms)}
    for a in readings:
        counts[r_index[a.reader]][a_index[a.arm]][a.session - 1] += 1
    return BalanceTable(tuple(readers), tuple(arms), sessions,
                        tuple(tuple(tuple(per_arm) for per_arm in per_reader)
                              for per_reader in counts))


def _code(i: int) -> str:
    """Blinded arm codes A, B, ... Z, AA, AB, ..."""
    letters = string.ascii_uppercase
    return letters[i] if i < len(letters) else _code(i // len(letters) - 1) + letters[i % 26]
