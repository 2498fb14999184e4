"""The review aids of issue #22 on the review page, without Gradio: the ReXVal counts suggested by
the reader's edit (draft vs the boxes' text) and the flags on the report's sentences, as the
panel and the page script need them.

A suggestion is never the reader's rating: the panel pre-fills only the rows the reader has not
typed in, marks them, and the rating is refused until the reader ticks that they checked them;
what was suggested is stored beside what they confirmed (`rating.suggested`, migration 0013).

Reference-based flags (the draft's findings the dataset's report does not have, and the other
way round) are given only where a reference is passed: the review page shows the reference
anyway; a blinded reader-study reading passes none (`app.reader_study.reading`).
"""

from __future__ import annotations

import html
import json
import logging
from dataclasses import dataclass

from rrg_review.core.vocabulary import REXVAL_CATEGORIES, REXVAL_LABELS, SECTIONS
from rrg_review.metrics.findings.extract import FindingExtractor
from rrg_review.metrics.findings.flags import DraftFlag, flag_draft, reference_flags
from rrg_review.metrics.findings.suggest import SuggestedError, suggest_errors
from rrg_review.studies.records import ReportSections

log = logging.getLogger(__name__)

__all__ = ["AidsView", "EditSuggestion", "ReviewAids", "aids_json", "flags_html",
           "suggestion_html"]


@dataclass(frozen=True)
class EditSuggestion:
    """The errors the reader's edit suggests, per section, and the counts per category for the
    whole report: an observation changed in both findings and impression is one error (a
    reader counts it once), a statement with no observation counts on its own."""

    errors: tuple[tuple[str, SuggestedError], ...]  # (section, error), in section order

    def counts(self) -> dict[str, int]:
        """Every ReXVal category's suggested count, 0 included, in the vocabulary's order."""
        seen: set[tuple[str, str]] = set()
        out = dict.fromkeys(REXVAL_CATEGORIES, 0)
        for _, e in self.errors:
            if e.observation is not None:
                if (e.category, e.observation) in seen:
                    continue
                seen.add((e.category, e.observation))
            out[e.category] += 1
        return out

    @property
    def any(self) -> bool:
        return bool(self.errors)


@dataclass(frozen=True)
class AidsView:
    """Everything the review page shows of the aids for one text on screen: what the panel
    pre-fills and stores (`suggestion`), the flags, and their HTML and JSON for the page."""

    suggestion: EditSuggestion
    flags: tuple[DraftFlag, ...]
    flags_html: str
    suggestion_html: str
    marks_json: str


class ReviewAids:
    """One finding extractor (its tables take milliseconds to build) for every tab of a page;
    `extract` is pure, so concurrent handlers can share it."""

    def __init__(self) -> None:
        self.extractor = FindingExtractor()

    def suggest(self, drafts: dict[str, str], texts: dict[str, str]) -> EditSuggestion:
        """The errors suggested by the edit from `drafts` to `texts` (section -> text); no
        draft, no suggestion (the reader wrote the report, nothing of a model's to rate)."""
        errors: list[tuple[str, SuggestedError]] = []
        for section in SECTIONS:
            draft, final = drafts.get(section) or "", texts.get(section) or ""
            if draft and draft != final:
                errors += [(section, e) for e in
                           suggest_errors(draft, final, self.extractor).errors]
        return EditSuggestion(tuple(errors))

    def view(self, drafts: dict[str, str], texts: dict[str, str], *, has_prior: bool | None,
             reference: ReportSections | None) -> AidsView:
        """What the page shows for `texts` (the whole answer to one edit; bench/suggest_errors
        times exactly this)."""
        suggestion = self.suggest(drafts, texts)
        flags = self.flags(texts, has_prior=has_prior, reference=reference)
        return AidsView(suggestion, flags, flags_html(flags, texts, reference),
                        suggestion_html(suggestion, drafts, texts),
                        aids_json(texts, suggestion, flags))

    def flags(self, texts: dict[str, str], *, has_prior: bool | None,
              reference: ReportSections | None = None) -> tuple[DraftFlag, ...]:
        """The flags on the report as it is now: the ones that need no answer, plus, where a
        `reference` is given (never for a blinded reader), its reference-based ones (spans in
        the section's text; the reference's findings the text lacks point into the reference,
        section "reference findings" or "reference impression")."""
        out = list(flag_draft(texts.get("findings") or "", texts.get("impression") or "",
                              has_prior=has_prior, extractor=self.extractor))
        if reference is not None:
            for section in SECTIONS:
                ref = getattr(reference, section, None) or ""
                text = texts.get(section) or ""
                if ref and text:
                    for f in reference_flags(text, ref, self.extractor):
                        where = section if f.section == "draft" else f"reference {section}"
                        out.append(DraftFlag(f.kind, f.reason, where, f.span))
        return tuple(out)


def _quote(text: str, span: tuple[int, int] | None) -> str:
    return f"“{html.escape(text[span[0]:span[1]].strip())}”" if span else ""


def suggestion_html(suggestion: EditSuggestion, drafts: dict[str, str],
                    texts: dict[str, str]) -> str:
    """The suggestions as the reader reads them above the ReXVal boxes, each with the sentence
    it comes from (the draft's for what was removed, the reader's for what was added)."""
    if not suggestion.any:
        return ""
    items = []
    for section, e in suggestion.errors:
        sentence = (_quote(texts.get(section) or "", e.final) if e.final else
                    _quote(drafts.get(section) or "", e.draft) + " (removed)")
        items.append(f"<li data-category='{e.category}'><b>{html.escape(REXVAL_LABELS[e.category])}"
                     f"</b>: {html.escape(e.reason)} — {sentence}</li>")
    return ("<div class='rrg-suggest'><b>Suggested from your edit</b> (pre-filled in the "
            "clinically significant column where you have not typed; a suggestion is not "
            "your rating: check the counts, then tick <i>I checked the suggested counts</i>)"
            f"<ul>{''.join(items)}</ul></div>")


def flags_html(flags: tuple[DraftFlag, ...], texts: dict[str, str],
               reference: ReportSections | None) -> str:
    """The flags under the editor boxes, each with its sentence."""
    if not flags:
        return ""
    items = []
    for f in flags:
        if f.section.startswith("reference "):
            source = getattr(reference, f.section.removeprefix("reference "), None) or ""
        else:
            source = texts.get(f.section) or ""
        items.append(f"<li data-kind='{f.kind}'>⚑ {html.escape(f.reason)} — "
                     f"{_quote(source, f.span)}</li>")
    return f"<div class='rrg-flags'><b>Flags</b><ul>{''.join(items)}</ul></div>"


def aids_json(texts: dict[str, str], suggestion: EditSuggestion,
              flags: tuple[DraftFlag, ...]) -> str:
    """What the page script draws: per section the text the marks were computed for (a box that
    holds other text by now shows none until the next answer) and the marks [start, end,
    "flag" | "suggested", reason]; per ReXVal category the reasons for a hover title."""
    marks: dict[str, list[list[object]]] = {s: [] for s in SECTIONS}
    for f in flags:
        if f.section in marks:
            marks[f.section].append([f.span[0], f.span[1], "flag", f.reason])
    rows: dict[str, list[str]] = {}
    for section, e in suggestion.errors:
        rows.setdefault(e.category, []).append(e.reason)
        if e.final is not None:
            marks[section].append([e.final[0], e.final[1], "suggested",
                                   f"{REXVAL_LABELS[e.category]}: {e.reason}"])
    return json.dumps({"texts": {s: texts.get(s) or "" for s in SECTIONS}, "marks": marks,
                       "rows": {c: "; ".join(r) for c, r in rows.items()}})
