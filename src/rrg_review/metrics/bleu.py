"""BLEU-4 with the COCO-caption BleuScorer semantics (as ViLMedic scores RRG24).

Whitespace tokens (`str.split()`, case and punctuation kept), n-grams up to 4 clipped by the
reference counts, corpus BLEU from summed counts with the 'closest' reference length and COCO's
smoothing constants (tiny=1e-15, small=1e-9). Per-sample values are COCO's per-sentence BLEU-4.
Equality with `pycocoevalcap` is tested to 1e-6.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from rrg_review.metrics.base import Metric, Payload
from rrg_review.metrics.store import METRICS

N = 4
TINY = 1e-15
SMALL = 1e-9


def _ngrams(words: list[str]) -> Counter[tuple[str, ...]]:
    return Counter(tuple(words[i:i + k]) for k in range(1, N + 1)
                   for i in range(len(words) - k + 1))


def pair_stats(hyp: str, ref: str) -> list[int]:
    """[hyp length, reference length, guesses for n=1..4, clipped matches for n=1..4].

    These counts are what corpus BLEU sums, so they are kept per pair in the cache and a
    bootstrap can resample them.

    Args:
        hyp: the generated text.
        ref: the reference text.

    Returns:
        Ten whole numbers, in words and n-grams (all 0 for empty texts).
    """
    h, r = hyp.split(), ref.split()
    ref_counts = _ngrams(r)
    correct = [0] * N
    for gram, count in _ngrams(h).items():
        correct[len(gram) - 1] += min(ref_counts.get(gram, 0), count)
    guess = [max(0, len(h) - k + 1) for k in range(1, N + 1)]
    return [len(h), len(r), *guess, *correct]


def _bleu(testlen: float, reflen: float, guess: Sequence[float],
          correct: Sequence[float]) -> float:
    score = 1.0
    for k in range(N):
        score *= (correct[k] + TINY) / (guess[k] + SMALL)
    score **= 1.0 / N
    ratio = (testlen + TINY) / (reflen + SMALL)
    if ratio < 1:
        score *= math.exp(1 - 1 / ratio)
    return float(score)


@METRICS.metric
class Bleu4(Metric):
    name = "bleu4"
    keys = ("bleu4",)
    version = "coco-bleu4-closest-1"

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """Per-pair BLEU-4 and the counts corpus BLEU needs.

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {"bleu4": sentence BLEU-4 in [0, 1], "stats": `pair_stats`}.
        """
        out = []
        for hyp, ref in zip(hyps, refs, strict=True):
            s = pair_stats(hyp, ref)
            out.append({"bleu4": _bleu(s[0], s[1], s[2:6], s[6:10]), "stats": s})
        return out

    def matrix(self, payloads: Sequence[Payload]) -> np.ndarray:
        """Args:
            payloads: what `compute` returned, one per pair.

        Returns:
            One row per pair: sentence BLEU-4, then the ten `pair_stats` counts (11 columns).
        """
        return np.array([[p["bleu4"], *p["stats"]] for p in payloads],
                        dtype=np.float64).reshape(len(payloads), 11)

    def per_sample(self, m: np.ndarray) -> dict[str, np.ndarray]:
        """Args:
            m: the matrix from `matrix` (or resampled rows of it).

        Returns:
            {"bleu4": each pair's sentence BLEU-4}.
        """
        return {"bleu4": m[:, 0]}

    def corpus(self, m: np.ndarray) -> dict[str, float]:
        """Corpus BLEU-4 from the summed counts (not the mean of sentence scores), as COCO
        computes it.

        Args:
            m: the matrix from `matrix` (or resampled rows of it).

        Returns:
            {"bleu4": value in [0, 1]}; NaN for no rows.
        """
        if not len(m):
            return {"bleu4": float("nan")}
        total = m[:, 1:].sum(axis=0)
        return {"bleu4": _bleu(total[0], total[1], total[2:6], total[6:10])}


def bleu2_tokens(text: str) -> list[str]:
    """CXR-Report-Metric `run_eval.py::prep_reports`: lowercase, "." -> " .", split on single
    spaces, empty tokens dropped (other whitespace stays inside tokens, as there).

    Args:
        text: a report (anything else is turned into a str first).

    Returns:
        The tokens; empty for an empty or all-space text.
    """
    return [t for t in str(text).lower().replace(".", " .").split(" ") if t != ""]


def bleu2_sentence(hyp: list[str], ref: list[str]) -> float:
    """fast-bleu 0.0.90 `BLEU([ref], {"bigram": (0.5, 0.5)}).get_score([hyp])` (its nltk.cpp
    `corpus_bleu` over one hypothesis, smoothing method 1): clipped n-gram precisions with
    denominator max(1, hyp n-grams); 0 when no unigram matches; a zero bigram precision becomes
    1 / (10 * denominator); brevity penalty exp(1 - r/h) when h <= r.

    Args:
        hyp: the hypothesis tokens (`bleu2_tokens`).
        ref: the reference tokens.

    Returns:
        BLEU-2 in [0, 1]; 0 for an empty hypothesis.
    """
    if not hyp:
        return 0.0
    logs = 0.0
    for n in (1, 2):
        grams = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
        ref_grams = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
        matches = sum(min(c, ref_grams[g]) for g, c in grams.items())
        total = max(1, sum(grams.values()))
        if matches == 0:
            if n == 1:
                return 0.0
            logs += 0.5 * math.log(1 / (total * 10))
        else:
            logs += 0.5 * math.log(matches / total)
    h, r = len(hyp), len(ref)
    bp = 1.0 if h > r else math.exp(1 - r / h)
    return bp * math.exp(logs)


@METRICS.metric
class Bleu2(Metric):
    """BLEU-2 as RadCliQ / ReXrank score it (`bleu2`): one smoothed sentence-level score per
    report, corpus value the mean (not corpus BLEU)."""

    name = "bleu2"
    keys = ("bleu2",)
    version = "fast-bleu-0.0.90-bigram-smooth1-1"
    reference = "CXR-Report-Metric run_eval.py add_bleu_col (fast-bleu 0.0.90)"

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {"bleu2": its smoothed sentence BLEU-2}.
        """
        return [{"bleu2": bleu2_sentence(bleu2_tokens(h), bleu2_tokens(r))}
                for h, r in zip(hyps, refs, strict=True)]
