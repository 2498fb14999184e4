"""Flags on a draft before the reader edits it: sentences the tool can tell are likely wrong without
knowing the answer (issue #22, "Flags in the draft"). The text half only: what is flagged and why,
with the sentence spans; the review page does not show them yet.

- `contradiction`: one observation both reported and denied in the draft ("No pleural effusion."
  and "Small right effusion."), unless the denial is of another side, of another grade ("no
  large effusion") or of a change ("no new consolidation");
- `sections_disagree`: the findings and the impression disagree about an observation both name:
  presence, side (both stated) or severity (both stated). An impression leaving a finding out is
  not flagged (impressions summarise);
- `comparison_without_prior`: a change or comparison statement when the study has no prior;
- `prior_disagrees`: with the prior's report: "new" for an observation the prior already
  reports, "resolved" for one it never reported;
- `reference_extra` / `reference_missing` (scoring and admin views only, never for blinded
  readers: they read the reference): the draft's reported findings absent from the reference,
  and the reference's absent from the draft.

What it cannot know: whether the image shows the finding; a contradiction spread over wording it
has no table entry for; whether a prior exists when the caller does not say.
"""

from __future__ import annotations

from dataclasses import dataclass

from rrg_review.metrics.findings.extract import Finding, FindingExtractor, ReportFindings
from rrg_review.metrics.findings.suggest import suggest_errors

__all__ = ["DraftFlag", "flag_draft", "reference_flags"]

Span = tuple[int, int]
FLAG_KINDS = ("contradiction", "sections_disagree", "comparison_without_prior",
              "prior_disagrees", "reference_extra", "reference_missing")


@dataclass(frozen=True)
class DraftFlag:
    """One flagged sentence: the kind (FLAG_KINDS), a short reason for the reader, the section
    ("findings" or "impression") and the sentence's span in that section's text."""

    kind: str
    reason: str
    section: str
    span: Span


def flag_draft(findings: str, impression: str = "", *, has_prior: bool | None = None,
               prior: str | None = None,
               extractor: FindingExtractor | None = None) -> tuple[DraftFlag, ...]:
    """The flags of a draft that need no reference (see the module docstring).

    Args:
        findings: the draft's findings section.
        impression: the draft's impression section.
        has_prior: whether the patient has a prior study; None (unknown) flags no comparison.
        prior: the prior study's report text, where there is one.
        extractor: reuse one across calls.
    Returns:
        The flags in reading order, findings first, each sentence at most once per kind.
    """
    ex = extractor if extractor is not None else FindingExtractor()
    sections = {"findings": ex.extract(findings), "impression": ex.extract(impression)}
    flags: list[DraftFlag] = []
    for name, report in sections.items():
        flags += _contradictions(name, report)
        if has_prior is False:
            flags += [DraftFlag("comparison_without_prior",
                                f"{'/'.join(sorted(c.kinds))}: no prior study to compare with",
                                name, (c.sentence_start, c.sentence_end))
                      for c in report.comparisons]
        elif prior:
            flags += _prior_disagreements(name, report, ex.extract(prior))
    flags += _sections_disagree(sections["findings"], sections["impression"])
    seen: set[tuple[str, str, Span]] = set()
    out = []
    for f in sorted(flags, key=lambda f: (f.section != "findings", f.span, f.kind)):
        if (f.kind, f.section, f.span) not in seen:
            seen.add((f.kind, f.section, f.span))
            out.append(f)
    return tuple(out)


def reference_flags(draft: str, reference: str,
                    extractor: FindingExtractor | None = None) -> tuple[DraftFlag, ...]:
    """The draft's reported findings the reference does not report (`reference_extra`, spans in
    the draft) and the reference's the draft does not (`reference_missing`, spans in the
    reference). For scoring and admin views, never for blinded readers."""
    out = []
    for e in suggest_errors(draft, reference, extractor).errors:
        if e.category == "false_finding" and e.draft is not None:
            out.append(DraftFlag("reference_extra", f"{e.observation}: not in the reference",
                                 "draft", e.draft))
        elif e.category == "missing_finding" and e.final is not None:
            out.append(DraftFlag("reference_missing", f"{e.observation}: in the reference, "
                                 "not in the draft", "reference", e.final))
    return tuple(out)


def _span(f: Finding) -> Span:
    return (f.sentence_start, f.sentence_end)


def _compatible_side(a: Finding, b: Finding) -> bool:
    return a.laterality is None or b.laterality is None or a.laterality == b.laterality \
        or "bilateral" in (a.laterality, b.laterality)


# observations of which a report can have several (a line removed, another in place)
_SEVERAL = frozenset({"lines_tubes", "surgical_clips", "nodule", "granuloma", "fracture"})
_GRADE = {"minimal": 0, "mild": 0, "moderate": 1, "severe": 2}  # trace ~ small, for flags


def _plain_denial(f: Finding) -> bool:
    """A denial of the finding itself, not of one grade, kind or change of it ("no large
    effusion", "no focal consolidation", "no new opacity")."""
    return (f.presence == "negated" and f.severity is None and not f.qualifiers
            and not f.change & {"new", "worse", "better"} and f.observation not in _SEVERAL)


def _contradictions(section: str, report: ReportFindings) -> list[DraftFlag]:
    reported = [f for f in report.findings if f.presence == "positive"]
    denied = [f for f in report.findings if _plain_denial(f) and "resolved" not in f.change]
    out = []
    for n in denied:
        for p in reported:
            if p.observation != n.observation or p.sentence == n.sentence:
                continue
            if not _compatible_side(p, n):
                continue
            reason = f"{p.observation} both reported and denied"
            out += [DraftFlag("contradiction", reason, section, _span(p)),
                    DraftFlag("contradiction", reason, section, _span(n))]
    return out


def _sections_disagree(findings: ReportFindings, impression: ReportFindings) -> list[DraftFlag]:
    out = []
    for i in impression.findings:
        same = [f for f in findings.findings if f.observation == i.observation]
        if not same:
            continue
        if i.reported and all(_plain_denial(f) for f in same):
            reason = f"{i.observation}: reported in the impression, denied in the findings"
        elif _plain_denial(i) and all(f.reported for f in same):
            reason = f"{i.observation}: denied in the impression, reported in the findings"
        elif i.reported and i.laterality and all(
                f.reported and f.laterality and not _compatible_side(f, i) for f in same):
            reason = f"{i.observation}: {i.laterality} in the impression, " \
                     f"{same[0].laterality} in the findings"
        elif i.reported and i.severity and all(
                f.reported and f.severity and _GRADE[f.severity] != _GRADE[i.severity]
                for f in same):
            reason = f"{i.observation}: {i.severity} in the impression, " \
                     f"{same[0].severity} in the findings"
        else:
            continue
        out.append(DraftFlag("sections_disagree", reason, "impression", _span(i)))
        out += [DraftFlag("sections_disagree", reason, "findings", _span(f)) for f in same]
    return out


def _prior_disagreements(section: str, report: ReportFindings,
                         prior: ReportFindings) -> list[DraftFlag]:
    before = {f.observation for f in prior.findings if f.reported}
    out = []
    for f in report.findings:
        if "new" in f.change and f.reported and f.observation in before:
            out.append(DraftFlag("prior_disagrees", f"{f.observation}: called new, the prior "
                                 "already reports it", section, _span(f)))
        elif "resolved" in f.change and f.observation not in before:
            out.append(DraftFlag("prior_disagrees", f"{f.observation}: called resolved, the "
                                 "prior never reported it", section, _span(f)))
    return out
