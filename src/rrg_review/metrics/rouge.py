"""ROUGE-L F-measure from `rouge_score` (RougeScorer(['rougeL'], use_stemmer=True)), mean over
samples. The package's tokenizer lowercases and keeps [a-z0-9] tokens; an empty text scores 0."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from importlib.metadata import version
from typing import TYPE_CHECKING

from rrg_review.metrics.base import Metric, Payload
from rrg_review.metrics.store import METRICS

if TYPE_CHECKING:  # rouge_score loads only when the metric runs
    from rouge_score.rouge_scorer import RougeScorer


@METRICS.metric
class RougeL(Metric):
    name = "rougeL"
    keys = ("rougeL",)

    def __init__(self) -> None:
        self.version = f"rouge_score-{version('rouge-score')}-rougeL-stem"
        self._scorer: RougeScorer | None = None

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """Per-pair ROUGE-L F-measure (the scorer is built, and its stemmer memoised, once).

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {"rougeL": F-measure in [0, 1]}; 0 when either text has no token.
        """
        if self._scorer is None:
            from rouge_score import rouge_scorer

            self._scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
            _memoize_stemmer(self._scorer)
        scorer = self._scorer
        # rouge_score's argument order is (target, prediction)
        return [{"rougeL": scorer.score(ref, hyp)["rougeL"].fmeasure}
                for hyp, ref in zip(hyps, refs, strict=True)]


def _memoize_stemmer(scorer: RougeScorer) -> None:
    """Porter-stem each distinct word once: reports repeat their vocabulary, and stemming is
    most of rouge_score's time. Same stems, so the same scores (tested against rouge_score)."""
    tokenizer = getattr(scorer, "_tokenizer", None)
    stemmer = getattr(tokenizer, "_stemmer", None)
    if tokenizer is None or stemmer is None or not hasattr(stemmer, "stem"):
        return
    memo = lru_cache(maxsize=1 << 16)(stemmer.stem)

    class _Memo:
        stem = staticmethod(memo)

    tokenizer._stemmer = _Memo()
