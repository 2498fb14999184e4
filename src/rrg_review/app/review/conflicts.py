"""What the status line says when another tab or session saved a section this tab shows older:
which section, when, the choice (Keep mine / Take theirs), and the saved text quoted with the
words where it differs from the box marked.

The quote used to be the other text alone, in a status line that scrolls past six lines: a
new-user trial, comparing two near-identical findings word by word to choose, could not tell
what Take theirs would change. Its words that are not in the box are underlined (<ins>), from a
word diff (metrics/edits.py `word_diff`, the same diff the editor draws against the draft); the
quote itself stays the saved text, word for word, to read or copy (the box's own words are in
the box beside it)."""

from __future__ import annotations

import html
from collections.abc import Mapping

from rrg_review.app.review.service import RevisionView
from rrg_review.metrics.edits import word_diff

# said once under the quotes that mark anything
LEGEND = "(<ins>underlined</ins>: not in your box)"


def quote_against(saved: str, box: str) -> str:
    """The saved text, escaped, with its words that are not in `box` marked; plain where the
    two are the same words."""
    pieces = [p for p in word_diff(box, saved) if p.op != "delete"]
    if all(p.op == "equal" for p in pieces):
        return html.escape(saved)
    return " ".join(f"<ins>{html.escape(p.text)}</ins>" if p.op == "insert"
                    else html.escape(p.text) for p in pieces)


def conflict_message(conflicts: Mapping[str, RevisionView], boxes: Mapping[str, str],
                     told: frozenset[str] = frozenset()) -> str:
    """The conflicts in words: a refused section of the reader's own text, or (`told`) a newer
    save of a section the reader has not changed in this tab, which nothing of the tab's is
    saved over (Keep mine keeps only what the reader changed). `boxes`: the text of each
    section in the tab's box, which each quote is marked against."""
    # The choice comes first and each saved text last: the status box scrolls past about six
    # lines, and a new-user trial at 1366 px saw the quote cut off with the choice below it,
    # out of sight.
    heads, quotes = [], []
    for section, rev in conflicts.items():
        when = f"revision {rev.number} at {rev.created_at:%H:%M:%S}"
        if section in told:
            heads.append(f"⚠ **A newer version of the {section} was saved elsewhere ({when}).**")
        else:
            heads.append(f"⚠ **{section} not saved — it was saved elsewhere ({when}).** Your "
                         "text stays on screen.")
        box = boxes.get(section)
        quotes.append(f"The saved {section} reads: “"
                      f"{html.escape(rev.text) if box is None else quote_against(rev.text, box)}”")
    if told >= conflicts.keys():
        it = "it" if len(told) == 1 else "them"
        choice = f"You have not changed {it} in this tab: **Take theirs** shows the newer text."
    else:
        choice = "Choose **Keep mine** (saved on top, both kept in history) or **Take theirs**."
    legend = [LEGEND] if any("<ins>" in q for q in quotes) else []
    return "<br>".join([*heads, choice, *quotes, *legend])
