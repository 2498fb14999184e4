"""ROUGE-L F-measure from `rouge_score` (RougeScorer(['rougeL'], use_stemmer=True)), mean over
samples. The package's tokenizer lowercases and keeps [a-z0-9] tokens; an empty text scores 0."""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version

from metrics.base import Metric, Payload


class RougeL(Metric):
    name = "rougeL"
    keys = ("rougeL",)

    def __init__(self) -> None:
        self.version = f"rouge_score-{version('rouge-score')}-rougeL-stem"
        self._scorer = None

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        if self._scorer is None:
            from rouge_score import rouge_scorer

            self._scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
        # rouge_score's argument order is (target, prediction)
        return [{"rougeL": self._scorer.score(ref, hyp)["rougeL"].fmeasure}
                for hyp, ref in zip(hyps, refs, strict=True)]
