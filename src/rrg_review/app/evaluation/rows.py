"""The rows of an evaluation: the latest successful draft per (study, section, model) crossed
with the readers who reviewed it, read from the database in a fixed number of statements
whatever the number of studies (no per-study lazy loads)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import selectinload

from rrg_review.app.evaluation.results import ExportFilters, ReviewRow
from rrg_review.core.vocabulary import SECTIONS
from rrg_review.db.engine import Database
from rrg_review.db.models import Draft, Rating, Reader, Revision, Study, WorklistItem
from rrg_review.db.store import opaque_study_id, prior_ids_of, pseudonym_key

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


@dataclass(frozen=True)
class _Session:
    """Everything the rows are built from, each loaded by one statement."""

    drafts: dict[tuple[int, str, str], Draft]  # (study, section, preset) -> latest draft
    studies: dict[int, Study]
    readers: dict[int, str]
    draft_preset: dict[int, str]
    revisions: dict[tuple[int, int, str], Revision]  # (reader, study, section) -> latest
    ratings: dict[tuple[int, int], list[Rating]]  # (reader, study) -> in order
    active: dict[tuple[int, int], float]
    priors: dict[int, list[int]]  # study -> its priors' ids


def collect_rows(db: Database, filters: ExportFilters) -> list[ReviewRow]:
    """Latest successful draft per (study, section, preset) crossed with the readers who
    reviewed the study; drafts nobody reviewed give one row with reader None.

    Args:
        db: the database.
        filters: model, reader, source, since and whether to show the datasets' own keys.
    Returns:
        The rows in study-key order, metrics not yet filled.
    """
    with db.read() as s:
        data = _load(s, filters)
        key = None if filters.dataset_keys else _export_key(db, s)
        reviewers_of = _reviewers(data)
        rows: list[ReviewRow] = []
        for (study_id, section, preset), d in sorted(
                data.drafts.items(),
                key=lambda kv: (data.studies[kv[0][0]].study_key, kv[0][1:])):
            study = data.studies[study_id]
            if filters.source and study.source != filters.source:
                continue
            reviewers = sorted(reviewers_of.get((study_id, preset), ()))
            if filters.reader:
                reviewers = [r for r in reviewers if data.readers.get(r) == filters.reader]
            rows += _rows_of_draft(data, filters, study, section, d, reviewers, key)
    return rows


def _load(s: Session, filters: ExportFilters) -> _Session:
    stmt = select(Draft).where(Draft.error.is_(None)).order_by(Draft.id)
    if filters.model:
        stmt = stmt.where(Draft.preset == filters.model)
    drafts: dict[tuple[int, str, str], Draft] = {}
    for d in s.scalars(stmt):
        drafts[(d.study_id, d.section, d.preset)] = d
    studies = {st.id: st for st in s.scalars(
        select(Study).where(Study.id.in_({k[0] for k in drafts}))
        .options(selectinload(Study.reference)))}
    revisions: dict[tuple[int, int, str], Revision] = {}
    for r in s.scalars(select(Revision).where(Revision.reading_id.is_(None))
                       .order_by(Revision.number)):
        revisions[(r.reader_id, r.study_id, r.section)] = r
    ratings: dict[tuple[int, int], list[Rating]] = defaultdict(list)
    for rating in s.scalars(select(Rating).where(Rating.reading_id.is_(None))
                            .order_by(Rating.number)):
        ratings[(rating.reader_id, rating.study_id)].append(rating)
    return _Session(
        drafts=drafts, studies=studies, priors=prior_ids_of(s, list(studies.values())),
        readers={rid: name for rid, name in s.execute(select(Reader.id, Reader.name))},
        draft_preset={did: p for did, p in s.execute(select(Draft.id, Draft.preset))},
        revisions=revisions, ratings=ratings,
        active={(rid, sid): sec for rid, sid, sec in s.execute(select(
            WorklistItem.reader_id, WorklistItem.study_id, WorklistItem.active_seconds))})


def _reviewers(data: _Session) -> dict[tuple[int, str], set[int]]:
    """(study, preset) -> readers who reviewed that model's draft: they rated it (a rating
    without a preset counts for every model), or edited from it (a text saved before a model's
    draft existed counts for that model: the export showed no final for a study a
    reader reported before drafting it, until their next save; a new-user trial)."""
    presets_of: dict[int, set[str]] = defaultdict(set)
    drafted_at: dict[tuple[int, str], datetime] = {}  # (study, preset): its newest draft
    for (study_id, _, preset), d in data.drafts.items():
        presets_of[study_id].add(preset)
        if (study_id, preset) not in drafted_at or d.created_at > drafted_at[(study_id, preset)]:
            drafted_at[(study_id, preset)] = d.created_at
    out: dict[tuple[int, str], set[int]] = defaultdict(set)
    for (rid, sid), rs in data.ratings.items():
        for preset in presets_of.get(sid, ()):
            if any(r.preset in (None, preset) for r in rs):
                out[(sid, preset)].add(rid)
    for (rid, sid, _), rev in data.revisions.items():
        if rev.draft_id is None:  # written by hand: for the models drafted after it
            for preset in presets_of.get(sid, ()):
                if drafted_at[(sid, preset)] > rev.created_at:
                    out[(sid, preset)].add(rid)
            continue
        edited = data.draft_preset.get(rev.draft_id)
        if edited is not None:
            out[(sid, edited)].add(rid)
    return out


def _rows_of_draft(data: _Session, filters: ExportFilters, study: Study, section: str,
                   d: Draft, reviewers: Iterable[int], key: bytes | None) -> list[ReviewRow]:
    ref = study.reference
    shown_key = (study.study_key if key is None
                 else opaque_study_id(key, study.source, study.study_key))
    base: dict[str, Any] = dict(study_id=study.id, source=study.source, study_key=shown_key,
                split=study.split, section=section, preset=d.preset,
                model_id=d.model_id, model_revision=d.model_revision, draft=d.text or "",
                has_prior=(bool(data.priors.get(study.id)) if study.study_date is not None
                           else None),
                reference=getattr(ref, section, None) if ref else None)
    reviewers = list(reviewers)
    if not reviewers:
        if filters.reader is None and filters.since is None:
            return [ReviewRow(**base, reader=None, final=None)]
        return []
    rows = []
    for rid in reviewers:
        rating = next((r for r in reversed(data.ratings.get((rid, study.id), []))
                       if r.preset in (None, d.preset)), None)
        revision = data.revisions.get((rid, study.id, section))
        stamps = [x.created_at for x in (rating, revision) if x is not None]
        if filters.since and (not stamps or max(stamps).date() < filters.since):
            continue
        # a section the reader left as drafted while saving another is final as drafted (it
        # is the text in their box; it read as empty: found in a new-user trial)
        worked = rating is not None or any(
            (rid, study.id, other) in data.revisions for other in SECTIONS)
        final = revision.text if revision else (d.text if worked else None)
        rows.append(ReviewRow(
            **base, reader=data.readers.get(rid), final=final,
            likert=rating.likert if rating else None,
            acceptable=rating.acceptable if rating else None,
            errors=dict(rating.errors or {}) if rating else {},
            suggested=dict(rating.suggested) if rating and rating.suggested is not None
            else None,
            comment=rating.comment if rating else None,
            active_seconds=data.active.get((rid, study.id)),
            rated_at=rating.created_at.isoformat() if rating else None))
    return rows


def _export_key(db: Database, session: Session) -> bytes:
    """The pseudonym key (kept outside the database) that makes opaque study ids."""
    if db._key is not None:
        return db._key
    if db.read_only:
        return pseudonym_key(session)
    with db.write() as w:
        return pseudonym_key(w)
