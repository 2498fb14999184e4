"""BERTScore F1 via the `bert-score` package.

Official RRG24 configuration: `distilbert-base-uncased`, `num_layers=5`, baseline rescaling,
`idf=False`, lang en; key `bertscore`. Any other model or setting reports under
`bertscore[<model>]`, so a number is never passed off as the official one. Texts longer than the
model's 512-token limit are truncated by bert-score's tokenizer call; an empty hypothesis or
reference gets bert-score's own value (raw F1 0, then rescaled).
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

from metrics.base import Metric, MetricUnavailable, Payload

OFFICIAL_MODEL = "distilbert-base-uncased"
OFFICIAL_LAYERS = 5


class BertScore(Metric):
    name = "bertscore"
    chunk = None  # one call: each distinct text is embedded once, batches length-sorted

    def __init__(self, model: str = OFFICIAL_MODEL, num_layers: int = OFFICIAL_LAYERS,
                 rescale: bool = True, baseline_path: str | None = None,
                 batch_size: int = 64, device: str | None = None,
                 download: bool = True) -> None:
        self.model = model
        self.num_layers = num_layers
        self.rescale = rescale
        self.baseline_path = baseline_path
        self.batch_size = batch_size
        self.device = device
        self.download = download
        official = (model == OFFICIAL_MODEL and num_layers == OFFICIAL_LAYERS and rescale
                    and baseline_path is None)
        self.keys = ("bertscore",) if official else (f"bertscore[{model}]",)
        self.model_id = model
        self.version = (f"bert_score-{version('bert-score')}-L{num_layers}"
                        f"-{'rescaled' if rescale else 'raw'}-noidf")
        self._scorer = None

    def available(self) -> tuple[bool, str]:
        from model.hub import cached, offline

        if cached(self.model) is None and (offline() or not self.download):
            return False, (f"{self.model} is not in the local Hugging Face cache and downloads "
                           "are off; run `rrg-review models --fetch-metrics` with network access")
        return True, ""

    def _load(self):
        if self._scorer is None:
            ok, why = self.available()
            if not ok:
                raise MetricUnavailable(why)
            from bert_score import BERTScorer

            from model.hub import resolve

            path = str(resolve(self.model, download=self.download).path)
            baseline = self.baseline_path
            if self.rescale and baseline is None and Path(self.model).exists():
                raise MetricUnavailable(f"{self.model}: a local model needs baseline_path for "
                                        "rescaling (bert-score ships baselines by hub name)")
            if self.rescale and baseline is None:
                import bert_score

                baseline = str(Path(bert_score.__file__).parent / "rescale_baseline" / "en"
                               / f"{self.model}.tsv")
            self._scorer = BERTScorer(model_type=path, num_layers=self.num_layers,
                                      batch_size=self.batch_size, idf=False, lang="en",
                                      rescale_with_baseline=self.rescale,
                                      baseline_path=baseline, device=self.device)
        return self._scorer

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        if not hyps:
            return []
        scorer = self._load()
        # bert-score sorts by length internally and batches; F1 per pair comes back in order
        _, _, f1 = scorer.score(list(hyps), list(refs), batch_size=self.batch_size)
        return [{self.keys[0]: float(v)} for v in f1.tolist()]

    def close(self) -> None:
        self._scorer = None
