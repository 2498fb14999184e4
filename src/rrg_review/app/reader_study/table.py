"""A reader study's long-format readings table built from the database: one row per reading,
the columns of README's "Reader studies: analysis" table, so `study analyze NAME` feeds the
same checks and models as `study analyze --readings FILE`, and `--csv` hands statisticians the
same table.

Keys are pseudonymous: a reader is `R01`, `R02`, ... and a case `C0001`, ... by their place in
the study (the design file's reader order, the cases' stored order), never an account name or
a dataset key. The arm is its blinded code (`A`, `B`, ...) unless the export is an admin's
(`unblind`, audited by the caller): then its spec (`unassisted`, `draft:<preset>`, `reference`).
"""

from __future__ import annotations

import csv
import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from rrg_review.app.reader_study.service import ReaderStudyError
from rrg_review.core.vocabulary import SECTIONS
from rrg_review.db.engine import Database
from rrg_review.db.models import (
    Draft,
    Rating,
    ReaderStudy,
    ReaderStudyArm,
    ReaderStudyCase,
    ReaderStudyReader,
    Reading,
    ReadingSection,
    Revision,
)
from rrg_review.metrics.edits import word_error_rate

log = logging.getLogger(__name__)

COLUMNS = ("reader", "case", "arm", "session", "position", "seconds", "signed",
           "opened", "first_keystroke_seconds", "last_keystroke_seconds", "keystrokes",
           "edits", "accepted", "words_changed", "wer", "likert", "errors_significant",
           "errors_total")
TEXT = frozenset({"reader", "case", "arm", "signed", "opened"})
REAL = frozenset({"seconds", "first_keystroke_seconds", "last_keystroke_seconds", "wer"})


@dataclass(frozen=True)
class ReadingsTable:
    study: str
    unblinded: bool
    columns: dict[str, list[str]]  # column -> one text cell per reading

    def __len__(self) -> int:
        return len(self.columns["reader"])

    def write(self, path: Path) -> Path:
        """CSV, or Parquet by the suffix (`.parquet`, `.pq`): numbers typed, empty = null."""
        if path.suffix.lower() in (".parquet", ".pq"):
            return self._write_parquet(path)
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(COLUMNS)
            writer.writerows(zip(*(self.columns[c] for c in COLUMNS), strict=True))
        return path

    def _write_parquet(self, path: Path) -> Path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        def typed(c: str) -> Any:
            if c in TEXT:
                return pa.array(self.columns[c], type=pa.string())
            if c in REAL:
                return pa.array([float(v) if v else None for v in self.columns[c]],
                                type=pa.float64())
            return pa.array([int(v) if v else None for v in self.columns[c]], type=pa.int64())

        arrays = {c: typed(c) for c in COLUMNS}
        pq.write_table(pa.table(arrays), path)
        return path


def _aware(value: datetime | None) -> datetime | None:
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _num(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}".rstrip("0").rstrip(".")


def _since(opened: datetime | None, at: datetime | None) -> float | None:
    opened, at = _aware(opened), _aware(at)
    return None if opened is None or at is None else max(0.0, (at - opened).total_seconds())


def _finals(s: Session, reading_ids: list[int]) -> dict[int, dict[str, Revision]]:
    """reading -> section -> its latest revision."""
    out: dict[int, dict[str, Revision]] = defaultdict(dict)
    for r in s.scalars(select(Revision).where(Revision.reading_id.in_(reading_ids))
                       .order_by(Revision.number)):
        out[r.reading_id or 0][r.section] = r
    return out


def _drafts(s: Session, reading_ids: list[int]) -> dict[int, dict[str, ReadingSection]]:
    out: dict[int, dict[str, ReadingSection]] = defaultdict(dict)
    for row in s.scalars(select(ReadingSection).where(ReadingSection.reading_id.in_(reading_ids))):
        out[row.reading_id][row.section] = row
    return out


def _ratings(s: Session, reading_ids: list[int]) -> dict[int, Rating]:
    """reading -> its newest rating."""
    out: dict[int, Rating] = {}
    for r in s.scalars(select(Rating).where(Rating.reading_id.in_(reading_ids))
                       .order_by(Rating.number)):
        out[r.reading_id or 0] = r
    return out


def readings_table(db: Database, name: str, *, unblind: bool) -> ReadingsTable:
    """The study's readings table (see the module docstring).

    Raises:
        ReaderStudyError: no study by that name.
    """
    with db.read() as s:
        study = s.scalar(select(ReaderStudy).where(ReaderStudy.name == name))
        if study is None:
            raise ReaderStudyError([f"no reader study named {name!r}"])
        readers = {rid: f"R{pos + 1:02d}" for rid, pos in s.execute(
            select(ReaderStudyReader.reader_id, ReaderStudyReader.position)
            .where(ReaderStudyReader.reader_study_id == study.id))}
        cases = {cid: f"C{pos + 1:04d}" for cid, pos in s.execute(
            select(ReaderStudyCase.study_id, ReaderStudyCase.position)
            .where(ReaderStudyCase.reader_study_id == study.id))}
        arms = {a.id: (a.spec if unblind else a.code) for a in s.scalars(
            select(ReaderStudyArm).where(ReaderStudyArm.reader_study_id == study.id))}
        kinds = {a.id: a.kind for a in s.scalars(
            select(ReaderStudyArm).where(ReaderStudyArm.reader_study_id == study.id))}
        readings = list(s.scalars(select(Reading).where(Reading.reader_study_id == study.id)
                                  .order_by(Reading.reader_id, Reading.session,
                                            Reading.position)))
        ids = [r.id for r in readings]
        finals, sections, ratings = {}, {}, {}
        for i in range(0, len(ids), 5000):
            chunk = ids[i:i + 5000]
            finals.update(_finals(s, chunk))
            sections.update(_drafts(s, chunk))
            ratings.update(_ratings(s, chunk))
        drafts = _draft_texts(s, [sec.draft_id for per in sections.values()
                                  for sec in per.values() if sec.draft_id is not None])
        columns: dict[str, list[str]] = {c: [] for c in COLUMNS}
        for r in readings:
            row = _row(r, finals.get(r.id, {}), sections.get(r.id, {}), ratings.get(r.id),
                       drafts, kinds[r.arm_id])
            row.update(reader=readers[r.reader_id], case=cases[r.study_id], arm=arms[r.arm_id])
            for c in COLUMNS:
                columns[c].append(row[c])
    log.info("readings table of %s: %d readings", name, len(readings))
    return ReadingsTable(name, unblind, columns)


def _draft_texts(s: Session, draft_ids: list[int]) -> dict[int, str]:
    out: dict[int, str] = {}
    for i in range(0, len(draft_ids), 5000):
        out.update({did: text or "" for did, text in s.execute(
            select(Draft.id, Draft.text).where(Draft.id.in_(draft_ids[i:i + 5000])))})
    return out


def _row(r: Reading, final: dict[str, Revision], sections: dict[str, ReadingSection],
         rating: Rating | None, drafts: dict[int, str], kind: str) -> dict[str, str]:
    """One reading's cells (reader, case and arm are the caller's)."""
    firsts = [sec.first_keystroke_at for sec in sections.values() if sec.first_keystroke_at]
    lasts = [sec.last_keystroke_at for sec in sections.values() if sec.last_keystroke_at]
    signed, opened = _aware(r.signed_at), _aware(r.opened_at)
    row = {"session": str(r.session), "position": str(r.position),
           "seconds": _num(r.active_seconds), "signed": signed.isoformat() if signed else "",
           "opened": opened.isoformat() if opened else "",
           "first_keystroke_seconds": _num(_since(r.opened_at, min(firsts, default=None))),
           "last_keystroke_seconds": _num(_since(r.opened_at, max(lasts, default=None))),
           "keystrokes": str(sum(sec.keystrokes for sec in sections.values())),
           "edits": str(sum(sec.edits for sec in sections.values())),
           "accepted": "", "words_changed": "", "wer": "", "likert": "",
           "errors_significant": "", "errors_total": ""}
    if kind == "draft" and final and signed:
        draft = " ".join(drafts.get(sections[s].draft_id or -1, "") if s in sections else ""
                         for s in SECTIONS)
        text = " ".join(final[s].text if s in final else "" for s in SECTIONS)
        wer = word_error_rate(draft, text)
        row.update(accepted="1" if draft.split() == text.split() else "0", wer=_num(wer, 4),
                   words_changed=str(round(wer * max(1, len(draft.split())))))
    if rating is not None:
        counts = [(k, v) for per in (rating.errors or {}).values() for k, v in per.items()]
        row.update(likert="" if rating.likert is None else str(rating.likert),
                   errors_significant=str(sum(v for k, v in counts if k == "significant")),
                   errors_total=str(sum(v for _, v in counts)))
    return row
