"""A report section turned into its findings: what is observed, whether it is present, negated or
uncertain, where, how severe, and what change is stated.

Word-overlap metrics cannot say *what kind* of error an edit fixed; findings can: a positive
effusion the reader deleted is a false finding, a side changed from right to left is a location
error. The extraction is rule-based and offline (tables in `lexicon.py`, a NegEx-style scope
here), fast enough to run on every edit (well under a millisecond per sentence), and
deterministic. Not medspaCy: it pins numpy < 2 and does not fit our venv; not negspaCy, which
would fit but negates only and would bring spaCy's import into every command for the same
tables (lexicon's docstring says more).

Per sentence: tokens (lower case, singular, typos of the observation words corrected with
rapidfuzz's OSA distance), the longest observation phrase at each place, then the NegEx scope
(pre-triggers forward and post-triggers backward to the clause's end; the nearest trigger wins,
"or" loses to a negation), then the modifiers in the finding's own window: from the previous
conjunction (or finding) to the next one.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from rrg_review.metrics.findings import lexicon
from rrg_review.metrics.findings.sentences import Sentence, split_sentences

__all__ = ["Comparison", "Finding", "FindingExtractor", "ReportFindings", "Token", "normalise"]

Presence = Literal["positive", "negated", "uncertain"]

_TOKEN = re.compile(r"\d+(?:\.\d+)?(?:st|nd|rd|th)?|[a-z]+|[,;:?]")
# how far a trigger reaches, in tokens (NegEx uses 5 words; CXR lists are longer: "No
# pneumonia, effusions, edema, pneumothorax, adenopathy, nodules or masses")
SCOPE_TOKENS = 25
_NUMBER = re.compile(r"\d+(?:\.\d+)?$")
_IRREGULAR = {"rigth": "right", "rihgt": "right", "rght": "right", "riht": "right",
              "lfet": "left", "letf": "left", "lef": "left", "bilteral": "bilateral",
              "pneumothoraces": "pneumothorax", "apices": "apex", "bases": "base",
              "hila": "hila", "bullae": "bullae", "sulci": "sulcus", "diaphragms": "diaphragm",
              "lungs": "lung", "metastases": "metastasis", "analyses": "analysis",
              "granulomata": "granulomata", "masses": "mass", "processes": "process"}
# modifiers stop at these: the next statement's words start after them
_CONJUNCTIONS = frozenset({"and", "or", ",", "with", "without", "but", "which", ";", ":",
                           "no", "not", "that", "while", "whereas"})
_STOPWORDS = frozenset({"the", "a", "an", "is", "are", "was", "were", "be", "been", "of", "in",
                        "on", "at", "to", "and", "or", "with", "there", "this", "that", "it",
                        "its", "has", "have", "from", "for", "by", "as", "xxxx", "study",
                        "exam", "examination", "radiograph", "film", "view", "appear",
                        "appears", "seen", "noted", "again", "size", "within", "limit"})


def normalise(word: str) -> str:
    """Lower-case singular form of a word ("Effusions" -> "effusion", "opacities" ->
    "opacity"); words of three letters or fewer and those ending in -ss/-us/-is are kept."""
    w = word.lower()
    if w in _IRREGULAR:
        return _IRREGULAR[w]
    if len(w) <= 3 or not w.endswith("s") or w.endswith(("ss", "us", "is")):
        return w
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith(("sses", "xes")):
        return w[:-2]
    return w[:-1]


@dataclass(frozen=True)
class Token:
    norm: str
    start: int  # character span in the report
    end: int


@dataclass(frozen=True)
class Finding:
    """One mention of an observation in a sentence.

    `start`/`end` is the mention's span in the report text, `sentence_start`/`sentence_end` the
    span of its sentence (what a suggestion points at). `zones` are normalised ("upper" for
    upper lobe and apex, "lower" for lower lobe and base); `severity` one of minimal, mild,
    moderate, severe; `size_mm` the largest stated dimension; `change` the change kinds stated
    in its own words (new, worse, better, resolved, unchanged, comparison); `qualifiers` the
    words that narrow it ("focal", "acute": `lexicon.QUALIFIERS`)."""

    observation: str
    presence: Presence
    laterality: str | None
    zones: frozenset[str]
    severity: str | None
    size_mm: float | None
    change: frozenset[str]
    qualifiers: frozenset[str]
    sentence: int
    start: int
    end: int
    sentence_start: int
    sentence_end: int

    @property
    def reported(self) -> bool:
        """Positive or uncertain: the report puts it forward (ReXVal counts a hedged finding
        as reported)."""
        return self.presence != "negated"


@dataclass(frozen=True)
class Comparison:
    """A sentence that states a change or a comparison with a prior study: the kinds it states,
    the observations the sentence names, and its content words, by which the same statement is
    found in another version of the report."""

    kinds: frozenset[str]
    observations: frozenset[str]
    words: frozenset[str]
    sentence: int
    sentence_start: int
    sentence_end: int


@dataclass(frozen=True)
class ReportFindings:
    sentences: tuple[Sentence, ...]
    findings: tuple[Finding, ...]
    comparisons: tuple[Comparison, ...]


@dataclass(frozen=True)
class _Mention:
    observation: str
    first: int  # token index range [first, last)
    last: int
    anchor: int  # the token the scope is judged from
    words: frozenset[int]  # the tokens that name it (a trigger between them still counts)


class _PhraseTable:
    """Longest-match lookup of token phrases, by their first token."""

    def __init__(self, phrases: Iterable[tuple[str, str]]) -> None:
        table: dict[str, list[tuple[tuple[str, ...], str]]] = {}
        for phrase, value in phrases:
            words = tuple(phrase.split())
            table.setdefault(words[0], []).append((words, value))
        for entries in table.values():
            entries.sort(key=lambda e: -len(e[0]))
        self._table = table

    def words(self) -> set[str]:
        return {w for entries in self._table.values() for words, _ in entries for w in words}

    def match(self, norms: Sequence[str], i: int) -> list[tuple[int, str]]:
        """(length, value) of every longest phrase starting at i (values of equal phrases)."""
        out: list[tuple[int, str]] = []
        for words, value in self._table.get(norms[i], ()):
            n = len(words)
            if out and n < out[0][0]:
                break
            if tuple(norms[i:i + n]) == words:
                out.append((n, value))
        return out


class FindingExtractor:
    """Builds the lookup tables once (a few milliseconds); `extract` is then pure. One per
    process or per command; it keeps a cache of typo corrections, nothing else."""

    def __init__(self) -> None:
        self._observations = _PhraseTable((p, key) for key, phrases in
                                          lexicon.OBSERVATIONS.items() for p in phrases)
        roles = [(p, "pseudo") for p in lexicon.PSEUDO]
        roles += [(p, "pre_neg") for p in lexicon.PRE_NEGATION]
        roles += [(p, "post_neg") for p in lexicon.POST_NEGATION]
        roles += [(p, "pre_unc") for p in lexicon.PRE_UNCERTAIN]
        roles += [(p, "post_unc") for p in lexicon.POST_UNCERTAIN]
        roles += [(p, "end") for p in lexicon.TERMINATORS]
        self._triggers = _PhraseTable(roles)
        self._weak = frozenset(lexicon.WEAK_UNCERTAIN)
        self._change = _PhraseTable(lexicon.CHANGE.items())
        known = self._observations.words() | self._triggers.words() | self._change.words()
        known |= set(lexicon.LATERALITY) | set(lexicon.ZONES) | set(lexicon.SEVERITY)
        for _, subjects, states in lexicon.SPLIT_FINDINGS:
            known |= subjects | states
        known |= _STOPWORDS | lexicon.QUALIFIERS
        self._known = frozenset(known)
        self._fuzzy_targets = sorted(w for w in self._observations.words() if len(w) >= 7)
        self._corrections: dict[str, str] = {}

    # --- tokens -------------------------------------------------------------------------
    def tokens(self, text: str, offset: int = 0) -> list[Token]:
        """Normalised tokens of `text` with spans shifted by `offset`."""
        return [Token(self._correct(m.group()), offset + m.start(), offset + m.end())
                for m in _TOKEN.finditer(text.lower())]

    def _correct(self, raw: str) -> str:
        """The normalised word, or the observation word the writer mistyped ("efusion",
        "oacities") as that word. Only words of 6+ letters as written (targets of 7+), at most
        1 edit (2 from 10 letters)."""
        word = normalise(raw)
        if len(raw) < 6 or word in self._known or not word.isalpha():
            return word
        cached = self._corrections.get(word)
        if cached is not None:
            return cached
        from rapidfuzz import process
        from rapidfuzz.distance import OSA

        limit = 2 if len(raw) >= 10 else 1
        best = process.extractOne(word, self._fuzzy_targets, scorer=OSA.distance,
                                  score_cutoff=limit)
        fixed = best[0] if best is not None else word
        if len(self._corrections) < 50_000:
            self._corrections[word] = fixed
        return fixed

    # --- a report ---------------------------------------------------------------------------
    def extract(self, text: str) -> ReportFindings:
        """The findings and comparison statements of a report section (any text; empty gives
        none)."""
        sentences = split_sentences(text)
        findings: list[Finding] = []
        comparisons: list[Comparison] = []
        for index, sentence in enumerate(sentences):
            toks = self.tokens(sentence.text, sentence.start)
            norms = [t.norm for t in toks]
            mentions, used = self._mentions(norms)
            roles = self._roles(norms, used)
            scope = _Scope(roles, [m.first for m in mentions], len(norms), self._weak)
            changes = self._changes(norms, used)
            change_starts = [r.start for r, _ in changes]
            for k, m in enumerate(mentions):
                findings.append(self._finding(m, mentions, k, toks, norms, scope,
                                              (changes, change_starts), index, sentence))
            kinds = frozenset(kind for _, kind in changes)
            if kinds:
                observations = frozenset(m.observation for m in mentions)
                in_change = {i for r, _ in changes for i in r}
                words = frozenset(
                    n for i, n in enumerate(norms) if n.isalpha() and len(n) > 2
                    and n not in _STOPWORDS and i not in in_change)
                comparisons.append(Comparison(kinds, observations, words, index,
                                              sentence.start, sentence.end))
        return ReportFindings(sentences, tuple(findings), tuple(comparisons))

    def _mentions(self, norms: list[str]) -> tuple[list[_Mention], set[int]]:
        mentions: list[_Mention] = []
        used: set[int] = set()
        i = 0
        while i < len(norms):
            hit = self._observations.match(norms, i)
            if hit:
                n, key = hit[0]
                words = frozenset(range(i, i + n))
                last = mentions[-1] if mentions else None
                if last is not None and last.observation == key and last.last == i:
                    # one thing named by two words of its kind ("port catheter"): one
                    # finding, not two (a review aid suggested 2 missing findings for one
                    # line: a new-user trial)
                    mentions[-1] = _Mention(key, last.first, i + n, last.anchor,
                                            last.words | words)
                else:
                    mentions.append(_Mention(key, i, i + n, i, words))
                used.update(range(i, i + n))
                i += n
            else:
                i += 1
        for observation, subjects, states in lexicon.SPLIT_FINDINGS:
            if any(m.observation == observation for m in mentions):
                continue
            split = self._split(norms, used, observation, subjects, states)
            if split is not None:
                mentions.append(split)
                mentions.sort(key=lambda m: m.first)
                used.update(split.words)
        return mentions, used

    @staticmethod
    def _split(norms: list[str], used: set[int], observation: str, subjects: frozenset[str],
               states: frozenset[str]) -> _Mention | None:
        """"The heart is (mildly) enlarged", "enlarged cardiac silhouette", "the right
        hemidiaphragm remains elevated": a finding from a subject word and a state word at most
        five tokens apart, nothing between them ending the clause. Anchored at the state word,
        so "not enlarged" negates it."""
        for j, word in enumerate(norms):
            if word not in states or j in used:
                continue
            for h in range(max(0, j - 6), min(len(norms), j + 6)):
                if norms[h] not in subjects or h in used:
                    continue
                lo, hi = min(h, j), max(h, j)
                if not any(norms[x] in (",", ";", ":", "and", "but") for x in range(lo, hi)):
                    return _Mention(observation, lo, hi + 1, j, frozenset({h, j}))
        return None

    def _roles(self, norms: list[str], used: set[int]) -> list[tuple[int, int, frozenset[str],
                                                                      str]]:
        """The triggers of a sentence: (first, last token, roles, phrase), pseudo-triggers
        consumed and left out."""
        out: list[tuple[int, int, frozenset[str], str]] = []
        i = 0
        while i < len(norms):
            if i in used:
                i += 1
                continue
            hit = self._triggers.match(norms, i)
            if not hit:
                i += 1
                continue
            n = hit[0][0]
            if any(x in used for x in range(i, i + n)):
                i += 1
                continue
            kinds = frozenset(role for _, role in hit)
            if "pseudo" not in kinds:
                out.append((i, i + n, kinds, " ".join(norms[i:i + n])))
            i += n
        return out

    def _changes(self, norms: list[str], used: set[int]) -> list[tuple[range, str]]:
        out: list[tuple[range, str]] = []
        i = 0
        while i < len(norms):
            hit = self._change.match(norms, i) if i not in used else []
            if hit and not any(x in used for x in range(i, i + hit[0][0])):
                n, kind = hit[0]
                out.append((range(i, i + n), kind))
                i += n
            else:
                i += 1
        return out

    def _finding(self, m: _Mention, mentions: list[_Mention], k: int, toks: list[Token],
                 norms: list[str], scope: _Scope,
                 changes: tuple[list[tuple[range, str]], list[int]], index: int,
                 sentence: Sentence) -> Finding:
        lo = mentions[k - 1].last if k > 0 else 0
        hi = mentions[k + 1].first if k + 1 < len(mentions) else len(norms)
        pre_start = m.first
        while pre_start > lo and norms[pre_start - 1] not in _CONJUNCTIONS:
            pre_start -= 1
        post_end = m.last
        while post_end < hi and (norms[post_end] not in _CONJUNCTIONS or _apposition(
                norms, post_end, hi)):
            post_end += 1
        words = norms[pre_start:post_end]
        found, starts = changes
        own = found[bisect_left(starts, pre_start):bisect_left(starts, post_end)]
        return Finding(
            observation=m.observation,
            presence=scope.presence(m),
            laterality=_laterality(words),
            zones=frozenset(lexicon.ZONES[w] for w in words if w in lexicon.ZONES),
            severity=_severity(norms, pre_start, m.first, post_end),
            size_mm=_size(words),
            change=frozenset(kind for _, kind in own),
            qualifiers=frozenset(w for w in words if w in lexicon.QUALIFIERS),
            sentence=index,
            start=toks[m.first].start,
            end=toks[m.last - 1].end,
            sentence_start=sentence.start,
            sentence_end=sentence.end,
        )


class _Scope:
    """The triggers of one sentence, indexed so that each mention looks only at the triggers
    within `SCOPE_TOKENS` of it and asks "is there a terminator between?" in constant time
    (a 50 KB text without a period stays linear)."""

    def __init__(self, roles: list[tuple[int, int, frozenset[str], str]], starts: list[int],
                 n_tokens: int, weak: frozenset[str]) -> None:
        self.roles = sorted(roles)
        self.firsts = [r[0] for r in self.roles]
        ends = [0] * (n_tokens + 1)
        for first, _, kinds, _ in self.roles:
            if "end" in kinds:
                ends[first + 1] += 1
        for i in range(1, len(ends)):
            ends[i] += ends[i - 1]
        self.ends = ends  # ends[i]: terminators starting before token i
        self.starts = starts
        self.weak = weak

    def terminated(self, a: int, b: int) -> bool:
        """A terminator starts at a token in [a, b)."""
        return b > a and self.ends[b] - self.ends[a] > 0

    def mentions_between(self, a: int, b: int) -> bool:
        return bisect_left(self.starts, b) - bisect_right(self.starts, a) > 0

    def presence(self, m: _Mention) -> Presence:
        """NegEx: the nearest trigger whose scope reaches the mention decides; a terminator
        between them ends the scope; a weak uncertainty trigger ("or", "suggest") reaches only
        the mention next to it and loses to any negation in scope."""
        lo = bisect_left(self.firsts, m.anchor - SCOPE_TOKENS)
        hi = bisect_right(self.firsts, m.last + SCOPE_TOKENS)
        best: tuple[int, str, bool] | None = None  # (distance, presence, weak)
        negated = False
        for first, last, kinds, phrase in self.roles[lo:hi]:
            if last <= m.anchor and not self.terminated(last, m.anchor):
                distance, direction = m.anchor - last, "pre"
            elif first >= m.last and not self.terminated(m.last, first):
                distance, direction = first - m.last, "post"
            else:
                continue
            weak = phrase in self.weak
            if weak and self.mentions_between(min(first, m.anchor), max(first, m.anchor)):
                continue
            for kind, presence in ((f"{direction}_neg", "negated"),
                                   (f"{direction}_unc", "uncertain")):
                if kind in kinds:
                    negated |= presence == "negated"
                    if best is None or distance < best[0]:
                        best = (distance, presence, weak)
        if best is None:
            return "positive"
        if best[2] and negated:
            return "negated"
        return "negated" if best[1] == "negated" else "uncertain"


def _apposition(norms: list[str], i: int, hi: int) -> bool:
    """A comma that introduces the finding's place ("Calcified granuloma, left lung base")."""
    return (norms[i] == "," and i + 1 < hi
            and (norms[i + 1] in lexicon.LATERALITY or norms[i + 1] in lexicon.ZONES))


def _laterality(words: list[str]) -> str | None:
    sides = {lexicon.LATERALITY[w] for w in words if w in lexicon.LATERALITY}
    if "bilateral" in sides or {"right", "left"} <= sides:
        return "bilateral"
    return next(iter(sides), None)


def _severity(norms: list[str], pre_start: int, first: int, post_end: int) -> str | None:
    """The severity word nearest before the mention, else the first after it."""
    for i in range(first - 1, pre_start - 1, -1):
        if norms[i] in lexicon.SEVERITY:
            return lexicon.SEVERITY[norms[i]]
    for i in range(first, post_end):
        if norms[i] in lexicon.SEVERITY:
            return lexicon.SEVERITY[norms[i]]
    return None


def _size(words: list[str]) -> float | None:
    """The largest dimension stated ("2.5 x 1.8 cm" -> 25.0 mm), or None."""
    best: float | None = None
    numbers: list[float] = []
    for w in words:
        if _NUMBER.match(w):
            numbers.append(float(w))
        elif w in lexicon.UNITS_MM and numbers:
            size = max(numbers) * lexicon.UNITS_MM[w]
            best = size if best is None else max(best, size)
            numbers = []
        elif w != "x" and w != "by":
            numbers = []
    return best
