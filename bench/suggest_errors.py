"""Suggested ReXVal counts (issue #22) measured on real Open-i reports with known errors: each
report's findings (its impression where it has none) is edited in one of eleven ways with a known
answer, the suggestions are compared with that answer per category (precision, recall, F1, n),
and the time per pair is taken.

The edits: the six ReXVal categories, each from sentences written here (not from the extractor's
tables: other words, other orders, sizes, ordinals) inserted into the real report, plus real
sentences changed in place ("Stable X" losing its "Stable"); and five edits that change no
finding (sentence order, spacing, case and punctuation, a typo the reader fixed, "There is no X"
-> "No X", synonyms). An error in the draft (a false finding, a false comparison) is a pair whose
draft carries the inserted sentence and whose final is the report; an error the draft misses is
a pair whose final carries it. Targets: macro-F1 >= 0.8 over the six categories, <= 5 % of
edits that change no finding with any suggestion, < 20 ms p95 per pair.

Run: `.venv/bin/python -m bench.suggest_errors [--n 3955] [--seed 22] [--held-out]
[--show-misses 10]` (the reports are read from ../shared/data/NLMCXR_reports.tgz; quick check
without it: `--synthetic --n 200`).
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IU = ROOT.parent / "shared" / "data" / "NLMCXR_reports.tgz"
CATEGORIES = ("false_finding", "missing_finding", "wrong_location", "wrong_severity",
              "false_comparison", "omitted_comparison")
NO_CHANGE = ("reorder", "spacing_case_punctuation", "typo", "there_is_no", "synonym")
KINDS = CATEGORIES + NO_CHANGE

GRADES = {"minimal": ("trace", "tiny", "minimal"), "mild": ("small", "mild"),
          "moderate": ("moderate", "moderate-sized"), "severe": ("large", "severe",
                                                                  "extensive", "marked")}
ADVERBS = {"minimal": "minimally", "mild": "mildly", "moderate": "moderately",
           "severe": "markedly"}
SIDES = ("right", "left")
ZONES = ("upper", "lower")
ORDINALS = ("4th", "5th", "6th", "7th", "8th")


@dataclass(frozen=True)
class Template:
    """A sentence of one finding: what names its observation (the template is left out where
    the report already names it), its text with {sev}/{adv}/{side}/{zone}/{size}/{ord} slots,
    and the negative sentence a reader would write instead."""

    names: str  # a regular expression
    text: str
    negative: str


# what already names the observation in a report (the template is then not inserted: the
# answer would be a changed finding, not an added one)
EFFUSION = r"effusion|pleural fluid|hydrothorax|blunting"
PNEUMOTHORAX = r"pneumothora|pleural air"
CONSOLIDATION = r"consolidat|airspace|air space|infiltrat|pneumonia"
ATELECTASIS = r"atelecta|volume loss|collapse"
NODULE = r"nodul|mass|tumor|lesion|neoplas|metasta|granulom"
HEART = r"cardiomegaly|enlarge|cardiac silhouette|heart size|large heart"
EDEMA = r"edema|congestion|kerley|b-line|overload"
FRACTURE = r"fractur|fx"
HERNIA = r"hernia"
LINES = r"picc|catheter|tube|line|pacemaker|pacer|lead|port|generator|drain|icd|stent|svc"
EMPHYSEMA = r"emphysem|copd|obstructive|bulla|hyperinfla|hyperexpan"

TEMPLATES = (
    Template(EFFUSION, "A {sev} {side} pleural effusion is present.", "No pleural effusion."),
    Template(EFFUSION, "{Sev} {side}-sided pleural effusion.",
             "There is no pleural effusion."),
    Template(EFFUSION, "Blunting of the {side} costophrenic angle from a {sev} effusion.",
             "The costophrenic angles are sharp without effusion."),
    Template(EFFUSION, "There is a {sev} layering {side} effusion.",
             "No effusion is identified."),
    Template(PNEUMOTHORAX, "There is a {sev} {side} apical pneumothorax.",
             "No pneumothorax."),
    Template(PNEUMOTHORAX, "A {side} pneumothorax measuring {size} cm is seen.",
             "There is no evidence of pneumothorax."),
    Template(PNEUMOTHORAX, "{Sev} {side} pneumothorax along the {zone} lung.",
             "Pneumothorax is not seen."),
    Template(CONSOLIDATION, "{Side} {zone} lobe consolidation.",
             "No focal consolidation."),
    Template(CONSOLIDATION, "Focal airspace disease in the {side} {zone} lobe.",
             "No focal airspace disease."),
    Template(CONSOLIDATION, "There is {sev} consolidation of the {side} {zone} lobe.",
             "The lungs are free of consolidation."),
    Template(ATELECTASIS, "{Sev} platelike atelectasis in the {side} {zone} lung zone.",
             "No atelectasis."),
    Template(ATELECTASIS, "Subsegmental atelectasis at the {side} {zone} lung.",
             "There is no atelectasis."),
    Template(NODULE, "A {size} cm nodule projects over the {side} {zone} lung.",
             "No suspicious pulmonary nodule."),
    Template(NODULE, "There is a {size} cm mass in the {side} {zone} lobe.",
             "No mass is seen."),
    Template(NODULE, "{Size} mm pulmonary nodule in the {side} {zone} lobe.",
             "Negative for pulmonary nodules."),
    Template(HEART, "{Sev} cardiomegaly.", "No cardiomegaly."),
    Template(HEART, "The heart is {adv} enlarged.", "The heart is not enlarged."),
    Template(HEART, "The cardiac silhouette is {adv} enlarged.",
             "Cardiac silhouette is not enlarged."),
    Template(EDEMA, "{Sev} interstitial pulmonary edema.", "No pulmonary edema."),
    Template(EDEMA, "There is {sev} pulmonary edema.", "There is no edema."),
    Template(FRACTURE, "Acute fracture of the {side} {ord} rib.",
             "No displaced rib fracture."),
    Template(FRACTURE, "There is a displaced fracture of the {side} {ord} posterior rib.",
             "No acute fracture is identified."),
    Template(HERNIA, "{Sev} hiatal hernia.", "No hiatal hernia."),
    Template(LINES, "{Side} PICC line terminates in the {zone} SVC.", "No PICC line."),
    Template(LINES, "A {side} internal jugular catheter tip projects over the {zone} SVC.",
             "No central venous catheter."),
    Template(EMPHYSEMA, "{Sev} emphysematous changes.", "No emphysema."),
)
# written after the lexicon was frozen and never used to change it: how the suggestions fare on
# phrasings the code was not developed on (reported apart, `--held-out`)
HELD_OUT = (
    Template(EFFUSION, "Fluid layers in the dependent {side} pleural space, {sev} in amount.",
             "The pleural spaces are clear."),
    Template(PNEUMOTHORAX, "{Sev} amount of air in the {side} pleural space at the {zone} chest.",
             "No air in the pleural space."),
    Template(ATELECTASIS, "The {side} {zone} lobe is partially collapsed, {sev} in degree.",
             "The lobes are fully expanded."),
    Template(CONSOLIDATION, "Patchy {side} {zone} lobe pneumonia, {sev} in extent.",
             "No pneumonia."),
    Template(NODULE, "Lobulated {size} cm soft tissue lesion at the {side} {zone} hilum.",
             "No focal lesion."),
    Template(HEART, "{Sev} widening of the cardiac silhouette.",
             "Heart size within normal limits."),
    Template(FRACTURE, "Nondisplaced break in the {side} {ord} rib cortex.",
             "Ribs intact."),
    Template(LINES, "Tip of the {side} subclavian port catheter lies in the {zone} SVC.",
             "No lines or tubes."),
    Template(HERNIA, "{Sev} sliding hiatus hernia behind the heart.", "No hernia."),
    Template(r"scar|fibros", "Streaky {sev} {side} {zone} zone scarring.", "No scarring."),
    Template(EDEMA, "Perihilar haziness from {sev} fluid overload.",
             "No evidence of fluid overload."),
)
# change statements: (suffix to a finding sentence, standalone sentence)
CHANGE_SUFFIXES = (", unchanged from the prior study.", ", new since the prior examination.",
                   ", increased compared with the previous radiograph.",
                   ", slightly decreased from prior.", ", which is stable.",
                   ", similar to the study of XXXX.", ", worse than on the last film.")
CHANGE_SENTENCES = ("No significant change since the prior study.",
                    "Findings are unchanged compared with the previous radiograph.",
                    "Stable appearance of the chest since XXXX.",
                    "The appearance is similar to the prior exam.")
SYNONYMS = (("focal airspace disease", "focal consolidation"),
            ("airspace disease", "consolidation"), ("air space disease", "consolidation"),
            ("infiltrate", "airspace consolidation"), ("cardiomegaly", "cardiac enlargement"),
            ("hyperinflated", "hyperexpanded"), ("hyperexpanded", "hyperinflated"),
            ("pleural effusions", "effusions"), ("pleural effusion", "pleural fluid"),
            ("calcified granuloma", "granuloma"), ("degenerative changes", "spondylosis"),
            ("lymphadenopathy", "adenopathy"), ("emphysema", "COPD"),
            ("tortuous", "ectatic"), ("atelectasis", "atelectatic change"),
            ("opacity", "density"), ("opacities", "densities"), ("pneumothorax", "pleural air"))
TYPO_WORDS = ("effusion", "pneumothorax", "consolidation", "atelectasis", "cardiomegaly",
              "emphysema", "granuloma", "opacity", "opacities", "effusions", "pneumonia",
              "fracture", "degenerative")


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    draft: str
    final: str
    truth: dict[str, int] = field(default_factory=dict)


def load_texts(archive: Path = IU) -> list[tuple[str, str]]:
    """(file name, findings or else impression) of every Open-i report with text."""
    from rrg_review.studies.importers.base import get_importer
    from rrg_review.studies.records import StudyRecord

    out = []
    for record in get_importer("iu-xray").read(archive):
        if isinstance(record, StudyRecord) and record.reference is not None:
            text = record.reference.findings or record.reference.impression
            if text:
                out.append((record.origin.rsplit("/", 1)[-1], text))
    return out


def load_studies(archive: Path = IU) -> list[tuple[str, str, str]]:
    """(file name, findings, impression) of every Open-i report with both."""
    from rrg_review.studies.importers.base import get_importer
    from rrg_review.studies.records import StudyRecord

    return [(r.origin.rsplit("/", 1)[-1], r.reference.findings, r.reference.impression)
            for r in get_importer("iu-xray").read(archive)
            if isinstance(r, StudyRecord) and r.reference is not None
            and r.reference.findings and r.reference.impression]


def flag_figures(studies: list[tuple[str, str, str]]) -> tuple[list[str], list[str]]:
    """Draft flags on real reports (the radiologists' own, so a flag is mostly a false alarm
    or a real inconsistency of the report): lines to print, and a few flagged examples."""
    from rrg_review.metrics.findings.extract import FindingExtractor
    from rrg_review.metrics.findings.flags import FLAG_KINDS, flag_draft

    extractor = FindingExtractor()
    times, per_kind, flagged, examples = [], dict.fromkeys(FLAG_KINDS, 0), 0, []
    for name, findings, impression in studies:
        t0 = time.perf_counter()
        flags = flag_draft(findings, impression, extractor=extractor)
        times.append((time.perf_counter() - t0) * 1000)
        flagged += bool(flags)
        for kind in {f.kind for f in flags}:
            per_kind[kind] += 1
        if flags and len(examples) < 6:
            f = flags[0]
            text = findings if f.section == "findings" else impression
            examples.append(f"{name} {f.kind}: {f.reason}: {text[f.span[0]:f.span[1]]!r}")
    times.sort()
    n = max(1, len(studies))
    lines = [f"draft flags on {len(studies)} Open-i studies (findings + impression, prior "
             f"unknown): {flagged} studies flagged ({100 * flagged / n:.1f} %): "
             + ", ".join(f"{k} {v}" for k, v in per_kind.items() if v),
             f"draft flags per study: p50 {statistics.median(times):.2f} ms, p95 "
             f"{times[min(len(times) - 1, int(0.95 * len(times)))]:.2f} ms (target p95 < 50 ms)"]
    return lines, examples


def page_figures(studies: list[tuple[str, str, str]]) -> list[str]:
    """The review page's whole answer to one edit (`ReviewAids.view`: the suggestion over both
    sections, the flags with the reference's, their HTML and JSON), as `Editor.aids` computes
    it on every change of the boxes: each study's report is the draft, the reader's edit drops
    its first findings sentence and adds a finding, and the next study's report is the
    reference (so the reference flags have work to do)."""
    from rrg_review.app.review.aids import ReviewAids
    from rrg_review.studies.records import ReportSections

    aids = ReviewAids()
    times = []
    for i, (_, findings, impression) in enumerate(studies):
        drafts = {"findings": findings, "impression": impression}
        rest = findings.split(". ", 1)[-1]
        texts = {"findings": rest + " Small left pleural effusion.", "impression": impression}
        _, ref_findings, ref_impression = studies[(i + 1) % len(studies)]
        t0 = time.perf_counter()
        aids.view(drafts, texts, has_prior=False,
                  reference=ReportSections(ref_findings, ref_impression))
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return [f"review page's answer per edit (suggestion + flags + reference flags, both "
            f"sections, {len(times)} studies): p50 {statistics.median(times):.2f} ms, p95 "
            f"{times[min(len(times) - 1, int(0.95 * len(times)))]:.2f} ms, max "
            f"{times[-1]:.2f} ms (target p95 < 70 ms: 20 for the suggestion + 50 for flags)"]


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.?!])\s+", text.strip()) if s]


def _insert(text: str, sentence: str, rng: random.Random) -> str:
    parts = _sentences(text)
    parts.insert(rng.randint(0, len(parts)), sentence)
    return " ".join(parts)


def _fill(t: Template, rng: random.Random, grade: str | None = None, side: str | None = None,
          zone: str | None = None, size: float | None = None) -> str:
    grade = grade or rng.choice(list(GRADES))
    sev = rng.choice(GRADES[grade])
    values = {"sev": sev, "Sev": sev.capitalize(), "adv": ADVERBS[grade],
              "side": side or rng.choice(SIDES), "zone": zone or rng.choice(ZONES),
              "size": f"{size if size is not None else rng.choice((0.6, 1.2, 2.5, 3.1)):g}",
              "ord": rng.choice(ORDINALS)}
    values["Side"] = values["side"].capitalize()
    values["Size"] = f"{float(values['size']) * 10:g}"
    return t.text.format(**values)


def _templates(templates: tuple[Template, ...], text: str, need: str = "") -> list[Template]:
    return [t for t in templates if not re.search(t.names, text, re.I) and need in t.text]


def _finding_case(kind: str, name: str, text: str, rng: random.Random,
                  templates: tuple[Template, ...]) -> Case | None:
    pool = _templates(templates, text)
    if not pool:
        return None
    t = rng.choice(pool)
    sentence = _fill(t, rng)
    if kind == "false_finding":  # the draft reports it; the reader deleted or negated it
        final = text if rng.random() < 0.5 else _insert(text, t.negative, random.Random(1))
        draft = _insert(text, sentence, random.Random(1))
        return Case(name, kind, draft, final, {kind: 1})
    draft = text if rng.random() < 0.5 else _insert(text, t.negative, random.Random(1))
    return Case(name, kind, draft, _insert(text, sentence, random.Random(1)), {kind: 1})


def _modifier_case(kind: str, name: str, text: str, rng: random.Random,
                   templates: tuple[Template, ...]) -> Case | None:
    if kind == "wrong_location":
        pool = _templates(templates, text, "{side}")
        if not pool:
            return None
        t = rng.choice(pool)
        grade, zone, size = rng.choice(list(GRADES)), rng.choice(ZONES), 1.2
        sides = list(SIDES)
        rng.shuffle(sides)
        change_zone = "{zone}" in t.text and rng.random() < 0.3
        a = _fill(t, random.Random(5), grade, sides[0], zone, size)
        b = _fill(t, random.Random(5), grade, sides[0] if change_zone else sides[1],
                  ("lower" if zone == "upper" else "upper") if change_zone else zone, size)
    else:
        pool = [t for t in _templates(templates, text) if "{sev}" in t.text.lower()
                or "{adv}" in t.text or "{size}" in t.text.lower()]
        if not pool:
            return None
        t = rng.choice(pool)
        grades = list(GRADES)
        rng.shuffle(grades)
        side, zone = rng.choice(SIDES), rng.choice(ZONES)
        sizes = rng.sample((0.6, 1.2, 2.5, 3.1, 4.5), 2)
        a = _fill(t, random.Random(5), grades[0], side, zone, sizes[0])
        b = _fill(t, random.Random(5), grades[1], side, zone, sizes[1])
    where = random.Random(3)
    draft, final = _insert(text, a, where), _insert(text, b, random.Random(3))
    return Case(name, kind, draft, final, {kind: 1})


def _comparison_case(kind: str, name: str, text: str, rng: random.Random,
                     templates: tuple[Template, ...]) -> Case | None:
    stable = [s for s in _sentences(text) if re.match(r"Stable [a-z]", s)
              and not re.search(r"unchanged|prior|previous|interval|again|new|stable .*stable",
                                s[7:], re.I)]
    if kind == "false_comparison" and stable and rng.random() < 0.4:
        s = rng.choice(stable)
        return Case(name, kind, text, text.replace(s, s[7].upper() + s[8:], 1), {kind: 1})
    pool = _templates(templates, text)
    if not pool:
        return None
    with_change = rng.random() < 0.7
    plain = _fill(t := rng.choice(pool), random.Random(9))
    if with_change:
        changed = plain[:-1] + rng.choice(CHANGE_SUFFIXES)
        without, with_ = _insert(text, plain, random.Random(2)), _insert(
            text, changed, random.Random(2))
    else:
        without = _insert(text, plain, random.Random(2))
        with_ = _insert(without, rng.choice(CHANGE_SENTENCES), rng)
    del t
    if kind == "false_comparison":
        return Case(name, kind, with_, without, {kind: 1})
    return Case(name, kind, without, with_, {kind: 1})


def _no_change_case(kind: str, name: str, text: str, rng: random.Random) -> Case | None:
    parts = _sentences(text)
    if kind == "reorder":
        if len(parts) < 2:
            return None
        shuffled = parts[:]
        while shuffled == parts:
            rng.shuffle(shuffled)
        return Case(name, kind, text, " ".join(shuffled))
    if kind == "spacing_case_punctuation":
        edits: list[Callable[[str], str]] = [
            lambda s: "  ".join(parts), lambda s: "\n".join(parts), lambda s: s.lower(),
            lambda s: s.rstrip("."), lambda s: s.replace(". ", "; ", 1),
            lambda s: s.replace(". ", ".. ", 1), lambda s: s.upper() if len(s) < 200 else s.lower(),
            lambda s: re.sub(r"\s+,", ",", s.replace(",", " , ")),
        ]
        return Case(name, kind, text, rng.choice(edits)(text))
    if kind == "typo":
        words = [w for w in TYPO_WORDS if re.search(rf"\b{w}\b", text)]
        if not words:
            return None
        w = rng.choice(words)
        i = rng.randint(1, len(w) - 3)
        typo = w[:i] + w[i + 1] + w[i] + w[i + 2:] if rng.random() < 0.5 else w[:i] + w[i + 1:]
        return Case(name, kind, re.sub(rf"\b{w}\b", typo, text, count=1), text)
    if kind == "there_is_no":
        if re.search(r"\bThere (?:is|are) no ", text):
            return Case(name, kind, text, re.sub(r"\bThere (?:is|are) no ", "No ", text,
                                                 count=1))
        if re.search(r"(?:^|\. )No [a-z]", text):
            return Case(name, kind, text, re.sub(r"(^|\. )No ([a-z])", r"\1There is no \2",
                                                 text, count=1))
        return None
    found = [(a, b) for a, b in SYNONYMS if re.search(rf"\b{a}\b", text, re.I)]
    if not found:
        return None
    a, b = rng.choice(found)
    return Case(name, kind, text, re.sub(rf"\b{a}\b", b, text, count=1, flags=re.I))


def make_case(kind: str, name: str, text: str, rng: random.Random,
              templates: tuple[Template, ...] = TEMPLATES) -> Case | None:
    """One pair of this kind from one report, or None where the report does not allow it."""
    if kind in ("false_finding", "missing_finding"):
        return _finding_case(kind, name, text, rng, templates)
    if kind in ("wrong_location", "wrong_severity"):
        return _modifier_case(kind, name, text, rng, templates)
    if kind in ("false_comparison", "omitted_comparison"):
        return _comparison_case(kind, name, text, rng, templates)
    return _no_change_case(kind, name, text, rng)


def build_cases(texts: list[tuple[str, str]], seed: int = 22,
                templates: tuple[Template, ...] = TEMPLATES) -> list[Case]:
    """One case per report, the kinds taken in turn (a report that does not allow a kind
    gets the next one that it allows)."""
    rng = random.Random(seed)
    cases = []
    for i, (name, text) in enumerate(texts):
        for k in range(len(KINDS)):
            case = make_case(KINDS[(i + k) % len(KINDS)], name, text, rng, templates)
            if case is not None:
                cases.append(case)
                break
    return cases


_NEGATION_CUES = re.compile(r"\b(?:no|not|without|negative|free|clear|normal|resolved|"
                            r"removed|exclude|excluded|versus|vs|or|may|possibl[ey]|"
                            r"likely|suggest\w*|question\w*)\b", re.I)
_SIDE = re.compile(r"\b(right|left)\b", re.I)
_GRADE = re.compile(r"\b(small|mild|moderate|large|severe|minimal|trace|tiny)\b", re.I)
_GRADE_SWAP = {"small": "large", "mild": "severe", "moderate": "mild", "large": "small",
               "severe": "mild", "minimal": "moderate", "trace": "large", "tiny": "large"}


def real_sentence_cases(texts: list[tuple[str, str]]) -> list[Case]:
    """Real Open-i sentences edited in place, the phrasing the radiologist's own: a sentence
    with one side word (or one grade word) and no negation or hedge cue gets the other side
    (another grade). The answer assumes that the word belongs to the sentence's one reported
    finding, which a reader would check; the figure is the share of these edits suggested as
    that category."""
    cases = []
    for name, text in texts:
        for sentence in _sentences(text):
            if _NEGATION_CUES.search(sentence) or "XXXX" in sentence:
                continue
            sides, grades = _SIDE.findall(sentence), _GRADE.findall(sentence)
            if len(sides) == 1 and not grades:
                word = sides[0]
                other = {"right": "left", "left": "right"}[word.lower()]
                other = other.capitalize() if word[0].isupper() else other
                edited = _SIDE.sub(other, sentence, count=1)
                kind = "wrong_location"
            elif len(grades) == 1 and not sides:
                word = grades[0]
                other = _GRADE_SWAP[word.lower()]
                other = other.capitalize() if word[0].isupper() else other
                edited = _GRADE.sub(other, sentence, count=1)
                kind = "wrong_severity"
            else:
                continue
            cases.append(Case(name, kind, text, text.replace(sentence, edited, 1), {kind: 1}))
            break
    return cases


@dataclass(frozen=True)
class Evaluation:
    per_category: dict[str, tuple[int, int, int, int]]  # tp, fp, fn, n (pairs of the kind)
    macro_f1: float
    no_change_pairs: int
    no_change_flagged: int
    per_kind_flagged: dict[str, tuple[int, int]]
    times_ms: list[float]
    misses: list[tuple[Case, dict[str, int]]]

    @property
    def no_change_rate(self) -> float:
        return self.no_change_flagged / max(1, self.no_change_pairs)


def f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 1.0


def evaluate(cases: list[Case]) -> Evaluation:
    """Suggestions vs the known answers: per category tp/fp/fn over counts (a count of 2
    where the answer is 1 is one tp and one fp), and the share of no-change edits with any."""
    from rrg_review.metrics.findings.extract import FindingExtractor
    from rrg_review.metrics.findings.suggest import suggest_errors

    extractor = FindingExtractor()
    totals = {c: [0, 0, 0, 0] for c in CATEGORIES}
    kinds: dict[str, list[int]] = {k: [0, 0] for k in NO_CHANGE}
    times, misses = [], []
    for case in cases:
        t0 = time.perf_counter()
        got = suggest_errors(case.draft, case.final, extractor).counts()
        times.append((time.perf_counter() - t0) * 1000)
        for c in CATEGORIES:
            want, have = case.truth.get(c, 0), got.get(c, 0)
            row = totals[c]
            row[0] += min(want, have)
            row[1] += max(0, have - want)
            row[2] += max(0, want - have)
            row[3] += case.kind == c
        if case.kind in kinds:
            kinds[case.kind][0] += 1
            kinds[case.kind][1] += bool(got)
        if got != case.truth:
            misses.append((case, got))
    per = {c: (r[0], r[1], r[2], r[3]) for c, r in totals.items()}
    macro = statistics.fmean(f1(tp, fp, fn) for tp, fp, fn, _ in per.values())
    flagged = sum(v[1] for v in kinds.values())
    return Evaluation(per, macro, sum(v[0] for v in kinds.values()), flagged,
                      {k: (v[0], v[1]) for k, v in kinds.items()}, times, misses)


def report(ev: Evaluation) -> list[str]:
    lines = ["category              n    tp   fp   fn  precision  recall    F1"]
    for c, (tp, fp, fn, n) in ev.per_category.items():
        p = tp / (tp + fp) if tp + fp else 1.0
        r = tp / (tp + fn) if tp + fn else 1.0
        lines.append(f"{c:<20} {n:>4} {tp:>5} {fp:>4} {fn:>4}  {p:9.3f} {r:7.3f} "
                     f"{f1(tp, fp, fn):5.3f}")
    lines.append(f"macro-F1 over the six categories: {ev.macro_f1:.3f} (target >= 0.8)")
    lines.append(f"edits that change no finding with a suggestion: {ev.no_change_flagged}/"
                 f"{ev.no_change_pairs} = {100 * ev.no_change_rate:.1f} % (target <= 5 %)")
    lines.append("  " + ", ".join(f"{k} {v[1]}/{v[0]}" for k, v in ev.per_kind_flagged.items()))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=None, help="reports used (default all)")
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--archive", type=Path, default=IU, help=f"default {IU}")
    parser.add_argument("--synthetic", action="store_true",
                        help="report-like texts from bench.scoring's sentences instead of "
                             "Open-i (a quick check where ../shared is absent)")
    parser.add_argument("--held-out", action="store_true",
                        help="also measure on the held-out phrasings (HELD_OUT)")
    parser.add_argument("--show-misses", type=int, default=0, metavar="K",
                        help="print K pairs whose suggestion differs from the answer")
    args = parser.parse_args()
    if args.synthetic:
        from bench.scoring import synthetic_texts

        texts = [(f"synthetic-{i}", t) for i, t in enumerate(synthetic_texts())]
    elif not args.archive.is_file():
        print(f"error: the Open-i reports are not at {args.archive} (or use --synthetic)",
              file=sys.stderr)
        return 1
    else:
        texts = load_texts(args.archive)
    if args.n is not None:
        texts = random.Random(args.seed).sample(texts, min(args.n, len(texts)))
    cases = build_cases(texts, args.seed)
    t0 = time.perf_counter()
    ev = evaluate(cases)
    wall = time.perf_counter() - t0
    times = sorted(ev.times_ms)
    source = "synthetic" if args.synthetic else "Open-i"
    print(f"{len(cases)} {source} edit pairs from {len(texts)} reports (seed {args.seed})")
    print("\n".join(report(ev)))
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    print(f"speed: {len(cases) / wall:.0f} pairs/s; per pair p50 {statistics.median(times):.2f} "
          f"ms, p95 {p95:.2f} ms, max {times[-1]:.2f} ms (target p95 < 20 ms)")
    shown = list(ev.misses[:args.show_misses])
    if not args.synthetic:
        studies = load_studies(args.archive)
        lines, examples = flag_figures(studies)
        print("\n".join(lines))
        print("\n".join(page_figures(studies)))
        for line in examples[:args.show_misses]:
            print("  flagged:", line)
    if args.held_out:
        held = evaluate(build_cases(texts, args.seed, HELD_OUT))
        print("held-out phrasings (written after the lexicon was frozen; no-change edits as "
              "above):")
        print("\n".join(report(held)[:8]))
        shown += held.misses[:args.show_misses]
        real = real_sentence_cases(texts)
        for kind in ("wrong_location", "wrong_severity"):
            of_kind = [c for c in real if c.kind == kind]
            ev_real = evaluate(of_kind)
            exact = len(of_kind) - len(ev_real.misses)
            print(f"real sentences edited in place, {kind}: suggested exactly in {exact}/"
                  f"{len(of_kind)} = {100 * exact / max(1, len(of_kind)):.1f} %")
            shown += ev_real.misses[:args.show_misses]
    for case, got in shown:
        print(f"--- {case.name} {case.kind}: want {case.truth} got {got}\n"
              f"  draft: {case.draft}\n  final: {case.final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
