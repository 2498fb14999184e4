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

from metrics.base import Metric, Payload

N = 4
TINY = 1e-15
SMALL = 1e-9


def _ngrams(words: list[str]) -> Counter:
    return Counter(tuple(words[i:i + k]) for k in range(1, N + 1)
                   for i in range(len(words) - k + 1))


def pair_stats(hyp: str, ref: str) -> list[int]:
    """[hyp length, reference length, guesses for n=1..4, clipped matches for n=1..4]."""
    h, r = hyp.split(), ref.split()
    ref_counts = _ngrams(r)
    correct = [0] * N
    for gram, count in _ngrams(h).items():
        correct[len(gram) - 1] += min(ref_counts.get(gram, 0), count)
    guess = [max(0, len(h) - k + 1) for k in range(1, N + 1)]
    return [len(h), len(r), *guess, *correct]


def _bleu(testlen: float, reflen: float, guess, correct) -> float:
    score = 1.0
    for k in range(N):
        score *= (correct[k] + TINY) / (guess[k] + SMALL)
    score **= 1.0 / N
    ratio = (testlen + TINY) / (reflen + SMALL)
    if ratio < 1:
        score *= math.exp(1 - 1 / ratio)
    return score


class Bleu4(Metric):
    name = "bleu4"
    keys = ("bleu4",)
    version = "coco-bleu4-closest-1"

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        out = []
        for hyp, ref in zip(hyps, refs, strict=True):
            s = pair_stats(hyp, ref)
            out.append({"bleu4": _bleu(s[0], s[1], s[2:6], s[6:10]), "stats": s})
        return out

    def matrix(self, payloads: Sequence[Payload]) -> np.ndarray:
        return np.array([[p["bleu4"], *p["stats"]] for p in payloads],
                        dtype=np.float64).reshape(len(payloads), 11)

    def per_sample(self, m: np.ndarray) -> dict[str, np.ndarray]:
        return {"bleu4": m[:, 0]}

    def corpus(self, m: np.ndarray) -> dict[str, float]:
        if not len(m):
            return {"bleu4": float("nan")}
        total = m[:, 1:].sum(axis=0)
        return {"bleu4": _bleu(total[0], total[1], total[2:6], total[6:10])}
