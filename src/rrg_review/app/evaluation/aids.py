"""The review aids measured against what readers did (issue #22: "measure the aid, not only build
it"): the ReXVal counts suggested from readers' edits against the counts they confirmed (a
suggestion is stored with the rating it was shown for, `rating.suggested`), and per flag kind how
often readers edited the draft sentences it marks and how many edited sentences it marked. The
readers' own counts and texts are the truth here: a low figure says the aid is not worth its
place on the page."""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Sequence

from rrg_review.app.evaluation.results import FlagOutcome, ReviewRow, SuggestionAgreement
from rrg_review.core.vocabulary import REXVAL_CATEGORIES
from rrg_review.metrics.agreement import cohen_kappa
from rrg_review.metrics.findings.extract import FindingExtractor
from rrg_review.metrics.findings.flags import FLAG_KINDS, DraftFlag, flag_draft, reference_flags
from rrg_review.metrics.findings.sentences import split_sentences

_SPACE = re.compile(r"\s+")

log = logging.getLogger(__name__)


def suggestion_agreements(ratings: Sequence[ReviewRow]) -> tuple[SuggestionAgreement, ...]:
    """Per ReXVal category: n, the summed suggested and confirmed counts, the share of exact
    agreement, and Cohen's kappa on whether the category has an error at all.

    Args:
        ratings: one row per rating (`steps.rated_once`); those without a stored suggestion
            (rated before migration 0013) are left out.

    Returns:
        One record per category in the vocabulary's order; empty without any suggestion.
    """
    rated = [r for r in ratings if r.suggested is not None]
    if not rated:
        return ()
    out = []
    for category in REXVAL_CATEGORIES:
        proposed = [int((r.suggested or {}).get(category, 0)) for r in rated]
        confirmed = [sum((r.errors.get(category) or {}).values()) for r in rated]
        a, b = [int(x > 0) for x in proposed], [int(x > 0) for x in confirmed]
        if len(rated) >= 2 and len(set(a)) == 2 and len(set(b)) == 2:
            kappa = cohen_kappa(a, b, [0, 1], weights=None)
            value, p = kappa.value, kappa.p_value
        elif len(rated) >= 2 and len(set(a)) + len(set(b)) == 3:
            # one side constant: chance agreement equals the observed one, kappa is 0 (and
            # statsmodels' test divides 0 by 0: no p-value)
            value, p = 0.0, None
        else:  # both sides constant, or n < 2: undefined
            value, p = float("nan"), None
        exact = sum(x == y for x, y in zip(proposed, confirmed, strict=True)) / len(rated)
        out.append(SuggestionAgreement(category, len(rated), sum(proposed), sum(confirmed),
                                       exact, value, p))
    return tuple(out)


def flag_outcomes(rows: Sequence[ReviewRow]) -> tuple[FlagOutcome, ...]:
    """Per flag kind, over the sections a reader reviewed (a final text exists): the draft's
    sentences flagged as the review page flags the draft when it opens (with the reference's
    flags: the page shows the reference), and whether the reader edited them (a draft sentence
    is edited when the final has no sentence equal to it up to case and spacing).

    Args:
        rows: every review row (one per study, section, model and reader).

    Returns:
        One record per flag kind in `FLAG_KINDS` order; empty when no section was reviewed.
    """
    reports: dict[tuple[int, str, str], dict[str, ReviewRow]] = defaultdict(dict)
    for r in rows:
        if r.reader and r.final is not None:
            reports[(r.study_id, r.preset, r.reader)][r.section] = r
    if not reports:
        return ()
    extractor = FindingExtractor()
    flagged = dict.fromkeys(FLAG_KINDS, 0)
    both = dict.fromkeys(FLAG_KINDS, 0)
    edited_total = n = 0
    for sections in reports.values():
        flags = _draft_flags(sections, extractor)
        for section, row in sections.items():
            n += 1
            kept = {_plain(x.text) for x in split_sentences(row.final or "")}
            for sentence in split_sentences(row.draft):
                edited = _plain(sentence.text) not in kept
                edited_total += edited
                kinds = {f.kind for f in flags if f.section == section
                         and sentence.start <= f.span[0] < max(sentence.end, sentence.start + 1)}
                for kind in kinds:
                    flagged[kind] += 1
                    both[kind] += edited
    return tuple(FlagOutcome(k, n, flagged[k], edited_total, both[k]) for k in FLAG_KINDS)


def _plain(text: str) -> str:
    return _SPACE.sub(" ", text).strip().casefold()


def _draft_flags(sections: dict[str, ReviewRow],
                 extractor: FindingExtractor) -> list[DraftFlag]:
    """The flags the review page shows on a draft when it opens (its drafts as the text)."""
    any_row = next(iter(sections.values()))
    drafts = {s: r.draft for s, r in sections.items()}
    out = list(flag_draft(drafts.get("findings", ""), drafts.get("impression", ""),
                          has_prior=any_row.has_prior, extractor=extractor))
    for section, row in sections.items():
        if row.reference and row.draft:
            out += [DraftFlag(f.kind, f.reason, section, f.span)
                    for f in reference_flags(row.draft, row.reference, extractor)
                    if f.section == "draft"]
    return out
