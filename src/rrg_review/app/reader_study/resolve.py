"""A design checked against the database: its readers are accounts, its presets are model
presets, its cases are imaging studies with images (and a reference report where a
`reference` arm shows it). Every problem is collected, so `study create` names them all at
once, each in one sentence naming the design file and the field."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from rrg_review.db.models import Reader, ReferenceReport, Study
from rrg_review.reader_study.design import StudyDesign

_CHUNK = 500  # keys per IN (...) list: well under SQLite's and PostgreSQL's parameter limits
_SHOWN = 5  # unknown names listed in a problem before "and N more"


@dataclass(frozen=True)
class Case:
    study_id: int
    identity: str  # "source:study_key": what the allocation orders (the same on any database)


@dataclass(frozen=True)
class Resolved:
    reader_ids: dict[str, int]
    cases: tuple[Case, ...]  # in (source, study_key) order


def _listed(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def resolve(s: Session, design: StudyDesign, origin: str,
            presets: Collection[str]) -> tuple[Resolved, list[str]]:
    """The design's readers and cases as database rows, and the problems found."""
    problems: list[str] = []
    rows = s.execute(select(Reader.name, Reader.id).where(Reader.name.in_(design.readers)))
    reader_ids = {name: id_ for name, id_ in rows}
    unknown = [r for r in design.readers if r not in reader_ids]
    if unknown:
        problems.append(f"{origin}: readers: no such account: {_listed(unknown)} (add them "
                        "with `rrg-review readers add NAME`)")
    missing = [a.preset for a in design.arms
               if a.preset is not None and a.preset not in presets]
    if missing:
        problems.append(f"{origin}: arms: unknown model preset {_listed(missing)} (known: "
                        f"{', '.join(sorted(presets))})")
    cases = _cases(s, design, origin, problems)
    return Resolved(reader_ids, cases), problems


def _cases(s: Session, design: StudyDesign, origin: str, problems: list[str]
           ) -> tuple[Case, ...]:
    selection = design.cases
    has_reference = (select(ReferenceReport.id).where(
        ReferenceReport.study_id == Study.id,
        or_(func.coalesce(ReferenceReport.findings, "") != "",
            func.coalesce(ReferenceReport.impression, "") != "")).exists())
    stmt = select(Study.id, Study.source, Study.study_key, Study.image_count, has_reference)
    if selection.source is not None:
        stmt = stmt.where(Study.source == selection.source)
    if selection.split is not None:
        stmt = stmt.where(Study.split == selection.split)
    if selection.keys is None:
        found = list(s.execute(stmt.where(Study.image_count > 0)))
    else:
        keys = list(selection.keys)
        found = [row for i in range(0, len(keys), _CHUNK)
                 for row in s.execute(stmt.where(Study.study_key.in_(keys[i:i + _CHUNK])))]
    field = "cases"
    by_key: dict[str, list[tuple[int, str, int, bool]]] = defaultdict(list)
    for id_, source, key, images, reference in found:
        by_key[key].append((id_, source, images, bool(reference)))
    if selection.keys is not None:
        _check_keys(selection.keys, by_key, origin, problems)
    elif not found:
        problems.append(f"{origin}: {field}: the filter matches no study with images "
                        f"(source {selection.source!r}, split {selection.split!r})")
    if any(a.kind == "reference" for a in design.arms):
        bare = [k for k, rows in by_key.items() if len(rows) == 1 and not rows[0][3]]
        if bare:
            problems.append(f"{origin}: {field}: {len(bare)} cases have no reference report "
                            f"for the reference arm to show: {_listed(sorted(bare))}")
    cases = [Case(rows[0][0], f"{rows[0][1]}:{key}") for key, rows in by_key.items()
             if len(rows) == 1]
    return tuple(sorted(cases, key=lambda c: c.identity))


def _check_keys(keys: tuple[str, ...], by_key: dict[str, list[tuple[int, str, int, bool]]],
                origin: str, problems: list[str]) -> None:
    unknown = [k for k in keys if k not in by_key]
    if unknown:
        problems.append(f"{origin}: cases: {len(unknown)} study keys match no stored study "
                        f"(of the source and split given): {_listed(unknown)}")
    twice = [k for k in keys if len(by_key.get(k, ())) > 1]
    if twice:
        problems.append(f"{origin}: cases: {len(twice)} study keys are in more than one "
                        f"source (name the source): {_listed(twice)}")
    bare = [k for k in keys if len(by_key.get(k, ())) == 1 and by_key[k][0][2] == 0]
    if bare:
        problems.append(f"{origin}: cases: {len(bare)} studies have no images (report-only "
                        f"references cannot be read): {_listed(bare)}")

