"""Sentences of a report that compare with an earlier examination, and a report without them.

The retrieval drafter copies another patient's report. That patient may have had a prior
study; the patient being read may not. A copied "Heart size is unchanged from the prior
radiograph" then cites a prior that does not exist, which a hurried reader may sign. When the
study being drafted has no prior, `without_comparisons` drops the copied sentences that only
make sense against an earlier examination.

What counts as a comparison (a small vocabulary, tested on real Open-i sentences):
- naming the earlier examination or the act of comparing: prior, previous(ly), comparison,
  compared, earlier study/exam/film/radiograph, since;
- words that state a change or its absence over time: interval, unchanged, no (significant)
  change, changed, again, redemonstrated, new (also "no new consolidation": a statement
  about what changed), stable, remain(s), persistent/persists, resolved/resolution,
  improved/improving/improvement, worsened/worsening, progressed/progression, decreased or
  increased *in size/in number/since/from*, now ("resolution" not in "high resolution" or
  "to ensure/document/confirm resolution", a recommendation).
- "stable" is treated as a comparison: in a chest radiograph report it says "as before"
  ("stable cardiomediastinal silhouette"); a sentence that needs it for another reason is
  rare in findings and impressions, and a dropped sentence costs the reader less than a
  false statement about a prior.
Deliberately *not* comparisons: "changes" of a disease ("emphysematous changes",
"degenerative changes"), "old"/"healed" (a finding's age, seen on this film), "known",
"residual", "postoperative", and "increased"/"decreased" alone ("increased interstitial
markings" describes this film).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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
    r"now"
    r")\b", re.IGNORECASE)

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
    return _COMPARISON.search(sentence) is not None


def without_comparisons(text: str | None) -> Filtered:
    """`text` without the sentences that compare with an earlier examination.

    Args:
        text: a report section (None or empty gives an empty result).

    Returns:
        The kept sentences joined by single spaces (the original text when nothing was
        dropped, so its own spacing and line breaks stay), and the dropped sentences.
    """
    parts = sentences(text or "")
    removed = tuple(s for s in parts if compares(s))
    if not removed:
        return Filtered(text or "", ())
    return Filtered(" ".join(s for s in parts if not compares(s)), removed)
