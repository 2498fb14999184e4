"""Sentences of a report that compare with an earlier examination, and a report without them.

The retrieval drafter copies another patient's report. That patient may have had a prior
study; the patient being read may not. A copied "Heart size is unchanged from the prior
radiograph" then cites a prior that does not exist, which a hurried reader may sign. When the
study being drafted has no prior, `without_comparisons` drops the copied sentences that only
make sense against an earlier examination. When it has a prior, the copied comparisons may
stand (the reader checks them against the prior beside the film), but a copied *date* never
can: "compared with 2024-09-02" is the other patient's examination, and a new-user trial saw
it in a draft beside this patient's prior of 2024-01-10. `without_dates` drops the sentences
that name a date.

What counts as a comparison (a small vocabulary, tested on real Open-i sentences):
- naming the earlier examination or the act of comparing: prior, previous(ly), comparison,
  compared, earlier study/exam/film/radiograph, since;
- words that state a change or its absence over time: interval, unchanged, no (significant)
  change, changed, again, redemonstrated, new (also "no new consolidation": a statement
  about what changed), stable, remain(s), persistent/persists, resolved/resolution,
  improved/improving/improvement, worsened/worsening, progressed/progression, decreased or
  increased *in size/in number/since/from*, now ("resolution" not in "high resolution" or
  "to ensure/document/confirm resolution", a recommendation); enlarging, increasing,
  decreasing, growing, smaller, larger, "has increased/decreased/enlarged"; a degree
  (increased, decreased, reduced, less, more) before a finding (effusion, pneumothorax,
  edema, consolidation, atelectasis, nodule, ...; "decreased right basal atelectasis", "less
  edema") or after it ("bibasilar opacities, increased"); "less/more prominent" unless
  against the other side ("than", "on the right"); development of, regressing, waning, no
  longer, reaccumulated, clearing/cleared (not "to confirm clearing"), removed/removal,
  similar appearance, gone, disappeared, re-expanded, still, evolving, recurrent,
  progressive (not "progressive massive fibrosis"), worse/better (not "left worse than
  right", "better seen on the lateral").
- "stable" is treated as a comparison: in a chest radiograph report it says "as before"
  ("stable cardiomediastinal silhouette"); a sentence that needs it for another reason is
  rare in findings and impressions, and a dropped sentence costs the reader less than a
  false statement about a prior.
Deliberately *not* comparisons: "changes" of a disease ("emphysematous changes",
"degenerative changes"), "old"/"healed" (a finding's age, seen on this film), "known",
"residual", "postoperative", "enlarged" (an enlarged heart is seen on this film), and
"increased"/"decreased" before anything else ("increased interstitial markings", "decreased
lung volumes" describe this film).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# what may stand between a degree word and its finding ("decreased right basal atelectasis")
_WHERE = (r"(?:right|left|bilateral|bibasilar|bibasal|basal|basilar|base|lower|upper|middle|"
          r"lobe|lung|apical|perihilar|retrocardiac|lingular|left-sided|right-sided|small|"
          r"moderate|large|mild|severe|trace|minimal|tiny|pleural|pulmonary|interstitial|"
          r"alveolar|air-?space|subsegmental|plate-?like|linear|patchy|focal|hilar|vascular|"
          r"central|diffuse|loculated|layering|subpulmonic|the)")
# findings whose degree says they changed ("increased opacity" is left out: it often describes
# this film)
_FINDING = (r"effusions?|pneumothorax|pneumothoraces|o?edema|consolidations?|atelectas[ie]s|"
            r"opacification|congestion|infiltrates?|cardiomegaly|nodules?|mass(?:es)?|"
            r"air-?space disease")
# "decreased size of the", "less amount of"
_EXTENT = r"(?:(?:size|amount|degree|extent) of )?"

_COMPARISON = re.compile(
    r"\b(?:"
    r"prior|previous(?:ly)?|comparison|compar(?:e|ed|ing)|earlier|since|"
    r"interval|unchanged|no (?:significant |appreciable |interval )?change|changed|"
    r"again|re-?demonstrat\w*|new(?:ly)?|stable|stability|"
    r"remain(?:s|ed|ing)?|persist\w*|resolv\w*|"
    # the resolution of a finding, not "high resolution" imaging or "to ensure resolution"
    r"(?<!high )(?<!ensure )(?<!document )(?<!confirm )resolution|"
    r"improv\w*|worsen\w*|progress(?:ed|ion|ing)|"
    r"(?:increased|decreased|increase|decrease) (?:in size |in number |slightly )?"
    r"(?:since|from)|(?:increased|decreased) in (?:size|number|conspicuity)|"
    # a change stated over time (a new-user trial found these kept for a first study):
    # "enlarging nodule", "increasing opacity", "has decreased", "smaller effusion", and
    # "decreased right effusion" (but "increased interstitial markings", "decreased lung
    # volumes", "enlarged heart" describe this film)
    r"enlarging|increasing|decreasing|growing|shrinking|smaller|larger|bigger|"
    # more ways of saying it changed or went away (new-user trial 18 found each kept):
    # "development of a left effusion", "regressing consolidation", "waning edema", "no longer
    # seen", "has reaccumulated", "clearing of the right base", "the ET tube has been
    # removed", "similar appearance", "pneumothorax is gone", "has largely disappeared",
    # "re-expanded", "still present", "evolving", "recurrent" (not "progressive massive
    # fibrosis", a disease's name; not "better seen on the lateral view")
    r"than (?:before|previously|last time|on the last)|"
    # a line or tube moved, a level changed (new-user trial 20: "The endotracheal tube has
    # been advanced", "has been withdrawn", "Lung volumes are lower"; not "the left
    # hemidiaphragm is higher than the right", not "lower lobe")
    r"(?:has|have) been (?:advanced|withdrawn|retracted|repositioned|pulled back|exchanged|"
    r"replaced|upsized|downsized)|(?:is|are) (?:now )?(?:slightly |somewhat |mildly )?"
    r"(?:lower|higher)\b(?! (?:lobes?|lung|zones?|than (?:the )?(?:right|left|normal|expected)))|"
    r"development of|(?:has|have) developed|regress\w*|wan(?:ing|ed)|waxing|no longer|"
    r"re-?accumulat\w*|(?<!show )(?<!confirm )(?<!document )(?<!ensure )(?<!until )"
    r"clear(?:ed|ing)|remov(?:ed|al)|similar(?: in)? appearance|gone|"
    r"disappear\w*|re-?appear\w*|re-?expan\w*|still|evolv\w*|recurr?\w*|"
    r"progressive(?! massive)|"
    # (not where on this film: "left worse than right", "better seen on the lateral view",
    # "CT would better define this")
    r"(?<!left )(?<!right )(?:worse|better)(?! (?:on|in|at|than|toward|towards|along|right|"
    r"left|seen|visuali|evaluat|assess|demonstrat|appreciat|characteri|define|show|depict)"
    r"\w*)|"
    r"(?:has|have|had) (?:\w+ )?(?:increased|decreased|enlarged|grown|diminished|shrunk)|"
    # a degree of change before a finding, whatever stands between ("decreased right basal
    # atelectasis", "less edema", "more confluent consolidation"; a new-user trial found the
    # first two kept): "increased opacity" and "decreased lung volumes" describe this film
    rf"(?:increased|decreased|reduced|diminished|less|more|lesser|greater) {_EXTENT}"
    rf"(?:{_WHERE} ){{0,4}}(?:{_FINDING})|"
    rf"(?:decreased|reduced|diminished|less|more) {_EXTENT}(?:{_WHERE} ){{0,4}}"
    r"(?:opacit(?:y|ies)|densit(?:y|ies))|"
    # "less prominent", "more conspicuous": unless it says where on this film, or against
    # what ("more prominent in the bases", "on the right", "less dense than the left")
    r"(?:less|more) (?:prominent|conspicuous|pronounced|apparent|evident|visible|extensive|"
    r"confluent|dense|opaque|marked)\b"
    r"(?! (?:in|on|at|toward|towards|along|within|over|throughout)\b)(?![^.]*\bthan\b)|"
    r"now"
    r")\b", re.IGNORECASE)

# the degree after the finding, a clause of its own: "Bibasilar opacities, increased." (not
# "low lung volumes, more prominent on the right")
_DEGREE_AFTER = re.compile(r",\s*(?:(?:slightly|mildly|somewhat|minimally|markedly)\s+)?"
                           r"(?:increased|decreased|reduced|less|more|worse|smaller|larger)"
                           r"(?=\s*(?:[.,;]|$))",
                           re.IGNORECASE)

_MONTH = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|"
          r"sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?")
# a calendar date as reports write one: 2024-09-02, 9/2/2024, 02.09.24, September 2, 2024,
# 2 Sep 2024, Sept 2024, a year alone ("compared with 2019"); never another number, "T11/T12"
# or a "1/2" fraction
_DATE = re.compile(
    r"\b(?:\d{4}-\d{1,2}-\d{1,2}|\d{1,2}[/.]\d{1,2}[/.](?:\d{4}|\d{2})(?![\d.])|"
    rf"{_MONTH} \d{{1,2}}(?:st|nd|rd|th)?,? \d{{4}}|\d{{1,2}} {_MONTH},? \d{{4}}|"
    rf"{_MONTH},? \d{{4}}|(?:19|20)\d{{2}}\b(?![.,]\d))", re.IGNORECASE)

# a sentence ends at . ! ? followed by white space and the next sentence's first character
# (a capital, a digit or an opening bracket/quote); "2.5 cm" and "T12." inside a list stay
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])|\n+")


@dataclass(frozen=True)
class Filtered:
    """A report section with its comparison sentences dropped, and what was dropped."""

    text: str
    removed: tuple[str, ...]


def sentences(text: str) -> list[str]:
    """The sentences of a report section, in order (stripped, none empty)."""
    return [s.strip() for s in _SENTENCE_END.split(text or "") if s.strip()]


def compares(sentence: str) -> bool:
    """Whether a sentence only makes sense against an earlier examination."""
    return (_COMPARISON.search(sentence) is not None
            or _DEGREE_AFTER.search(sentence) is not None)


def dated(sentence: str) -> bool:
    """Whether a sentence names a calendar date."""
    return _DATE.search(sentence) is not None


def _without(text: str | None, drop: Callable[[str], bool]) -> Filtered:
    parts = sentences(text or "")
    removed = tuple(s for s in parts if drop(s))
    if not removed:
        return Filtered(text or "", ())
    return Filtered(" ".join(s for s in parts if not drop(s)), removed)


def without_dates(text: str | None) -> Filtered:
    """`text` without the sentences that name a date (as `without_comparisons` returns it)."""
    return _without(text, dated)


def without_comparisons(text: str | None) -> Filtered:
    """`text` without the sentences that compare with an earlier examination.

    Args:
        text: a report section (None or empty gives an empty result).

    Returns:
        The kept sentences joined by single spaces (the original text when nothing was
        dropped, so its own spacing and line breaks stay), and the dropped sentences.
    """
    return _without(text, lambda s: compares(s) or dated(s))
