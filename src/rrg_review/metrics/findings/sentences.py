"""Sentence split for chest X-ray report text.

A general-purpose splitter (or `str.split(".")`) breaks CXR text in the wrong places: "Dr.",
"approx.", decimals ("2.5 cm"), numbered impressions ("1. Emphysema. 2. No effusion."), doubled
periods ("pleural effusion..") and Open-i's `XXXX` de-identification, and it misses the
boundaries a dictated report leaves without a period (a line break, "Normal chest No evidence of
tuberculosis"). A semicolon ends a sentence too (its clauses are statements of their own, and a
reader replacing ". " with "; " changes no finding). The rules here are the few that this text
needs; every sentence keeps its character span in the original text, so what is derived from it
(a finding, a suggested error) can point back at the words the reader sees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Sentence", "split_sentences"]

# words after which a period does not end a sentence (lower case, without the period)
_ABBREVIATIONS = frozenset({
    "dr", "drs", "mr", "mrs", "ms", "approx", "appr", "e.g", "i.e", "eg", "ie",
    "vs", "etc", "fig", "no", "nos", "st", "sq", "cf", "resp", "incl", "ca", "pt", "pts", "hx",
    "dx", "ap", "pa", "lat", "ant", "post", "sup", "inf", "ext", "med", "prox", "dist", "mm",
    "cm", "x", "al",
})
# abbreviations that do end a sentence when what follows starts a new one ("... 2 cm. No ...")
_ENDING_ABBREVIATIONS = frozenset({"mm", "cm", "etc", "x", "ap", "pa", "lat", "post", "hx"})
# a run of terminal punctuation, then white space or the end
_END = re.compile(r"[.!?;]+(?=\s|$)|\n\s*\n")
_LIST_MARKER = re.compile(r"(?:^|(?<=\s))(?:\d{1,2}[.)]|[-*\u2022])(?=\s)")
# a line break ends a sentence when the next line starts like a new one
_LINE_BREAK = re.compile(r"\n(?=[ \t]*(?:[A-Z]|\d{1,2}[.)]\s|[-*\u2022]\s))")
# run-on dictation: a capitalised word after a lower-case one ("... effusions Overexpanded
# lungs"); acronyms (PICC, XXXX) and eponyms of findings are not capitalised words here
_RUN_ON = re.compile(r"(?<=[a-z]) (?=(?!(?:Kerley|Swan|Dr|Drs|Mr|Mrs|Ms)\b)[A-Z][a-z]+\b)")
_WORD_BEFORE = re.compile(r"([A-Za-z][A-Za-z.]*|\d+)$")


@dataclass(frozen=True)
class Sentence:
    """One sentence: its text (stripped, list marker left out) and its span in the report."""

    start: int
    end: int
    text: str


def split_sentences(text: str) -> tuple[Sentence, ...]:
    """The sentences of `text`, in order, with their character spans.

    Empty text (or only white space and punctuation) has none. A numbered-list marker ("1.",
    "2)") or bullet at the start of a sentence is left out of its text and span; `XXXX` is kept
    as a word. The split never loses a character that belongs to a sentence: every word of the
    text lies in exactly one span.
    """
    cuts = _cuts(text)
    out: list[Sentence] = []
    start = 0
    for cut in [*cuts, len(text)]:
        piece = _sentence(text, start, cut)
        if piece is not None:
            out.append(piece)
        start = cut
    return tuple(out)


def _cuts(text: str) -> list[int]:
    cuts: set[int] = set()
    for match in _END.finditer(text):
        if match.group().startswith("\n") or not _protected(text, match.start(), match.end()):
            cuts.add(match.end())
    cuts.update(m.start() + 1 for m in _LINE_BREAK.finditer(text))
    cuts.update(m.end() for m in _RUN_ON.finditer(text))
    return sorted(c for c in cuts if 0 < c < len(text))


def _protected(text: str, dot: int, end: int) -> bool:
    """Whether the period at `dot` belongs to a word (abbreviation, list number) rather than
    ending a sentence."""
    if end - dot > 1 or text[dot] != ".":
        return False  # "..", "!", "?", ";" always end
    before = _WORD_BEFORE.search(text, max(0, dot - 40), dot)  # bounded: linear in the text
    if before is None:
        return False
    word = before.group(1).lower().rstrip(".")
    if word.isdigit():
        # "1." opening a line or following a finished sentence is a list marker
        k = before.start() - 1
        while k >= 0 and text[k] in " \t":
            k -= 1
        return len(word) <= 2 and (k < 0 or text[k] in "\n.:!?")
    if word not in _ABBREVIATIONS:
        return False
    following = text[end:].lstrip()
    if word == "no":  # "No. 2", not "... there is no."
        return following[:1].isdigit()
    if word in _ENDING_ABBREVIATIONS:
        return not (following[:1].isupper() or following[:1].isdigit() or following == "")
    return True


def _sentence(text: str, start: int, end: int) -> Sentence | None:
    while start < end and (text[start].isspace() or text[start] in ".;,"):
        start += 1
    marker = _LIST_MARKER.match(text, start)
    if marker is not None and marker.end() < end:
        start = marker.end()
        while start < end and text[start].isspace():
            start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    body = text[start:end]
    if not any(ch.isalnum() for ch in body):
        return None
    return Sentence(start, end, body)
