"""ReXVal error counts suggested by a reader's edit: the draft's findings aligned with the final's
(the reader's final text is the truth here), each difference that matters named by its ReXVal
category (`core.vocabulary.REXVAL_CATEGORIES`) with the sentence(s) it comes from.

The rules (issue #22):
- a reported (positive or uncertain) finding of the draft that the final does not report:
  `false_finding`; one the final reports and the draft does not: `missing_finding`;
- the same finding reported on both sides with another side or zone: `wrong_location`; with
  another severity or size: `wrong_severity`;
- a change or comparison statement of the draft that the final drops or contradicts:
  `false_comparison`; one the final adds: `omitted_comparison`. A statement that goes with a
  finding counted as false or missing is not counted again.
Edits that change no finding suggest nothing: order, spacing, case, punctuation, typos of the
observation words, "There is no X" for "No X", the synonyms of `lexicon.OBSERVATIONS`.

What it cannot know: a finding the extractor has no word for, a change of meaning its rules
miss (double negation, a side stated in another sentence), and whether an error is clinically
significant (ReXVal's second axis stays the reader's).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rrg_review.core.vocabulary import REXVAL_CATEGORIES
from rrg_review.metrics.findings.extract import (
    Comparison,
    Finding,
    FindingExtractor,
    ReportFindings,
)

__all__ = ["SuggestedError", "Suggestion", "suggest_errors"]

Span = tuple[int, int]
_MAX_CANDIDATES = 10_000


@dataclass(frozen=True)
class SuggestedError:
    """One suggested error: its category, the observation it is about (None for a comparison
    statement without one), a short reason, and the sentence spans in the draft and in the final
    (None where the sentence exists on one side only)."""

    category: str
    observation: str | None
    reason: str
    draft: Span | None
    final: Span | None


@dataclass(frozen=True)
class Suggestion:
    errors: tuple[SuggestedError, ...]

    def counts(self) -> dict[str, int]:
        """Count per ReXVal category, in the vocabulary's order, categories without a
        suggestion left out."""
        found = {c: sum(1 for e in self.errors if e.category == c) for c in REXVAL_CATEGORIES}
        return {c: n for c, n in found.items() if n}


def suggest_errors(draft: str, final: str,
                   extractor: FindingExtractor | None = None) -> Suggestion:
    """The ReXVal errors the edit from `draft` to `final` suggests (see the module docstring).

    Args:
        draft: the model's text of one section.
        final: the reader's text of the same section (the truth).
        extractor: reuse one across calls (building it takes a few milliseconds).
    """
    ex = extractor if extractor is not None else FindingExtractor()
    before, after = ex.extract(draft), ex.extract(final)
    errors = _finding_errors(_distinct(before.findings), _distinct(after.findings))
    errors += _comparison_errors(before, after, errors)
    order = {c: i for i, c in enumerate(REXVAL_CATEGORIES)}
    errors.sort(key=lambda e: (order[e.category], (e.draft or e.final or (0, 0))[0]))
    return Suggestion(tuple(errors))


def _distinct(findings: Iterable[Finding]) -> list[Finding]:
    """The findings less the repeats: a reported mention with no side, zone, severity or size
    of an observation reported before it, or described anywhere in the text, refers back to it
    ("Small right effusion. The effusion is unchanged."), and a finding stated twice alike is
    one finding."""
    items = list(findings)
    described = {f.observation for f in items if f.reported and not _bare(f)}
    seen: set[str] = set()
    stated: set[tuple[object, ...]] = set()
    out: list[Finding] = []
    for f in items:
        if f.reported and _bare(f) and (f.observation in described or f.observation in seen):
            continue
        key = (f.observation, f.reported, f.laterality, f.zones, f.severity, f.size_mm)
        if key in stated:  # the same finding said twice is one finding
            continue
        stated.add(key)
        if f.reported:
            seen.add(f.observation)
        out.append(f)
    return out


def _bare(f: Finding) -> bool:
    return f.laterality is None and not f.zones and f.severity is None and f.size_mm is None


def _span(f: Finding | Comparison) -> Span:
    return (f.sentence_start, f.sentence_end)


def _score(d: Finding, f: Finding) -> float:
    return (4.0 * (d.reported == f.reported) + 2.0 * (d.laterality == f.laterality)
            + (d.zones == f.zones) + (d.severity == f.severity) + (d.size_mm == f.size_mm))


def _align(draft: list[Finding], final: list[Finding]) -> tuple[list[tuple[Finding, Finding]],
                                                                 list[Finding], list[Finding]]:
    """Best-first pairing of the mentions of each observation: (pairs, draft left over, final
    left over). Beyond `_MAX_CANDIDATES` pairs of one observation (hostile text, not a report)
    the mentions are paired in order instead."""
    pairs: list[tuple[Finding, Finding]] = []
    only_draft: list[Finding] = []
    only_final: list[Finding] = []
    for obs in dict.fromkeys(f.observation for f in [*draft, *final]):
        ds = [d for d in draft if d.observation == obs]
        fs = [f for f in final if f.observation == obs]
        if len(ds) * len(fs) > _MAX_CANDIDATES:
            n = min(len(ds), len(fs))
            pairs += list(zip(ds[:n], fs[:n], strict=True))
            only_draft += ds[n:]
            only_final += fs[n:]
            continue
        candidates = sorted(((d, f) for d in ds for f in fs),
                            key=lambda p: (-_score(*p), abs(p[0].sentence - p[1].sentence)))
        used_d: set[int] = set()
        used_f: set[int] = set()
        for d, f in candidates:
            if id(d) not in used_d and id(f) not in used_f:
                used_d.add(id(d))
                used_f.add(id(f))
                pairs.append((d, f))
        only_draft += [d for d in ds if id(d) not in used_d]
        only_final += [f for f in fs if id(f) not in used_f]
    return pairs, only_draft, only_final


def _size_differs(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is not b
    return abs(a - b) > max(0.5, 0.1 * max(a, b))


def _finding_errors(draft: list[Finding], final: list[Finding]) -> list[SuggestedError]:
    pairs, only_draft, only_final = _align(draft, final)
    out: list[SuggestedError] = []
    for d, f in pairs:
        obs = d.observation
        if d.reported and not f.reported:
            out.append(SuggestedError("false_finding", obs, f"{obs}: reported in the draft, "
                                      "negated in the final", _span(d), _span(f)))
        elif f.reported and not d.reported:
            out.append(SuggestedError("missing_finding", obs, f"{obs}: negated in the draft, "
                                      "reported in the final", _span(d), _span(f)))
        elif d.reported:
            if d.laterality != f.laterality or d.zones != f.zones:
                where = " ".join(x for x in (d.laterality, *sorted(d.zones)) if x) or "unstated"
                now = " ".join(x for x in (f.laterality, *sorted(f.zones)) if x) or "unstated"
                out.append(SuggestedError("wrong_location", obs,
                                          f"{obs}: {where} -> {now}", _span(d), _span(f)))
            if d.severity != f.severity or _size_differs(d.size_mm, f.size_mm):
                out.append(SuggestedError("wrong_severity", obs, f"{obs}: "
                                          f"{_grade(d)} -> {_grade(f)}", _span(d), _span(f)))
    out += [SuggestedError("false_finding", d.observation, f"{d.observation}: not in the final",
                           _span(d), None) for d in only_draft if d.reported]
    out += [SuggestedError("missing_finding", f.observation, f"{f.observation}: not in the "
                           "draft", None, _span(f)) for f in only_final if f.reported]
    return out


def _grade(f: Finding) -> str:
    size = f"{f.size_mm:g} mm" if f.size_mm is not None else None
    return " ".join(x for x in (f.severity, size) if x) or "ungraded"


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = a | b
    return float(len(a & b)) / len(union) if union else 1.0


def _same_subject(a: Comparison, b: Comparison) -> tuple[float, bool, float]:
    """How surely two statements are about the same thing: the overlap of their observations
    (of their words where neither names one), then whether they state the same change, then
    the overlap of their words (two statements about tubes: the one that is "stable" in both)."""
    if a.observations or b.observations:
        subject = _jaccard(a.observations, b.observations)
    else:
        subject = _jaccard(a.words, b.words)
    return (subject, a.kinds - {"comparison"} == b.kinds - {"comparison"},
            _jaccard(a.words, b.words))


def _comparison_errors(before: ReportFindings, after: ReportFindings,
                       finding_errors: list[SuggestedError]) -> list[SuggestedError]:
    """Change statements of the draft vs the final, matched by what they are about; the ones
    left over (or contradicted) are comparison errors unless they go with a false or missing
    finding already counted."""
    pairs = sorted(((d, f, _same_subject(d, f)) for d in before.comparisons
                    for f in after.comparisons), key=lambda p: p[2], reverse=True)
    used_d: set[int] = set()
    used_f: set[int] = set()
    out: list[SuggestedError] = []
    for d, f, overlap in pairs:
        if overlap[0] < 0.5 or id(d) in used_d or id(f) in used_f:
            continue
        used_d.add(id(d))
        used_f.add(id(f))
        core_d, core_f = d.kinds - {"comparison"}, f.kinds - {"comparison"}
        if core_d != core_f:
            subject = ", ".join(sorted(d.observations)) or None
            out.append(SuggestedError(
                "false_comparison", subject, f"{subject or 'statement'}: "
                f"{'/'.join(sorted(core_d)) or 'compared'} -> "
                f"{'/'.join(sorted(core_f)) or 'compared'}", _span(d), _span(f)))
    counted_d = {e.observation for e in finding_errors if e.category == "false_finding"}
    counted_f = {e.observation for e in finding_errors if e.category == "missing_finding"}
    for d in before.comparisons:
        if id(d) not in used_d and not (d.observations and d.observations <= counted_d):
            subject = ", ".join(sorted(d.observations)) or None
            out.append(SuggestedError("false_comparison", subject, f"{subject or 'statement'}: "
                                      "change stated in the draft only", _span(d), None))
    for f in after.comparisons:
        if id(f) not in used_f and not (f.observations and f.observations <= counted_f):
            subject = ", ".join(sorted(f.observations)) or None
            what = subject or "statement"
            out.append(SuggestedError("omitted_comparison", subject,
                                      f"{what}: change stated in the final only", None,
                                      _span(f)))
    return out
