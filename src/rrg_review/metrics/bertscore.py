"""BERTScore F1 via the `bert-score` package, in two named configurations.

RRG24 (key `bertscore`): `distilbert-base-uncased`, `num_layers=5`, baseline rescaling,
`idf=False`, lang en, texts as given.

ReXrank (key `bertscore_rexrank`, the RadCliQ-v1 input): as CXR-Report-Metric's
`CXRMetric/run_eval.py::add_bertscore_col` (rajpurkarlab/CXR-Report-Metric @ 9c9ecad): model
`distilroberta-base` at bert-score's default layer for it (5), `rescale_with_baseline=True` with the
baseline TSV bert-score ships, runs of spaces collapsed (`re.sub(r' +', ' ', text)`) in both texts,
and IDF off: `calc_metric(..., use_idf)` is called with `config.USE_IDF = False` (the
`idf_sents` it passes are then ignored by bert-score).

Any other model or setting reports under its own key: `bertscore[<model>]` when rescaled with a
baseline, `bertscore_raw[<model>]` (or `bertscore_raw`) when not rescaled, so a number is never
passed off as an official one and raw and rescaled values never share a name. A model without a
baseline shipped by bert-score needs `baseline_path` (or `rescale=False`); saying so is the
"unavailable" reason. Texts longer than the model's 512-token limit are truncated by bert-score's
tokenizer call; an empty hypothesis or reference gets bert-score's own value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from rrg_review.metrics.base import MetricUnavailable, ModelMetric, Payload
from rrg_review.metrics.store import METRICS

if TYPE_CHECKING:
    from rrg_review.metrics.config import MetricConfig

if TYPE_CHECKING:  # bert-score and the hub load only when the metric runs
    from bert_score import BERTScorer

    from rrg_review.model.hub import ResolvedModel

OFFICIAL_MODEL = "distilbert-base-uncased"
OFFICIAL_LAYERS = 5
REXRANK_MODEL = "distilroberta-base"
REXRANK_LAYERS = 5  # bert_score.utils.model2layers["distilroberta-base"]


def shipped_baseline(model: str) -> Path:
    """Where bert-score keeps the rescaling baseline of a hub model (lang en).

    Args:
        model: a hub model name such as "distilbert-base-uncased".

    Returns:
        The path inside the installed bert-score package; the file may not exist.

    Raises:
        ModuleNotFoundError: bert-score is not installed.
    """
    from importlib.util import find_spec

    # found, not imported: importing bert_score imports torch (seconds), and the metrics panel
    # asks this on every page load only to say whether BERTScore is available
    spec = find_spec("bert_score")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'bert_score'", name="bert_score")
    package = Path(next(iter(spec.submodule_search_locations)))
    return package / "rescale_baseline" / "en" / f"{model}.tsv"


@METRICS.metric
class BertScore(ModelMetric["BERTScorer"]):
    name = "bertscore"
    keys: tuple[str, ...] = ("bertscore",)  # another model or no rescaling: its own key
    chunk = None  # one call: each distinct text is embedded once, batches length-sorted
    reference = "bert-score 0.3.13 BERTScorer (RRG24 configuration)"

    @classmethod
    def from_config(cls, config: MetricConfig) -> BertScore:
        """Args:
            config: the run's settings (model, layers, rescaling, baseline, device,
                download allowed); unset ones take the official RRG24 configuration.

        Returns:
            The metric, not loaded.
        """
        return cls(config.bertscore_model or OFFICIAL_MODEL,
                   config.bertscore_layers or OFFICIAL_LAYERS, config.bertscore_rescale,
                   config.bertscore_baseline, device=config.device, download=config.download)

    def __init__(self, model: str = OFFICIAL_MODEL, num_layers: int = OFFICIAL_LAYERS,
                 rescale: bool = True, baseline_path: str | None = None,
                 batch_size: int = 64, device: str | None = None,
                 download: bool = True, collapse_spaces: bool = False,
                 key: str | None = None) -> None:
        self.model = model
        self.num_layers = num_layers
        self.rescale = rescale
        self.baseline_path = baseline_path
        self.batch_size = batch_size
        self.device = device
        self.download = download
        self.collapse_spaces = collapse_spaces
        official = (model == OFFICIAL_MODEL and num_layers == OFFICIAL_LAYERS
                    and baseline_path is None and not collapse_spaces)
        if key is None:
            base = "bertscore" if rescale else "bertscore_raw"
            key = base if official else f"{base}[{model}]"
        self.keys = (key,)
        if key != "bertscore":
            self.name = key  # its own cache rows and result rows
        self.model_id = model
        self.version = (f"bert_score-{version('bert-score')}-L{num_layers}"
                        f"-{'rescaled' if rescale else 'raw'}-noidf"
                        f"{'-collapse' if collapse_spaces else ''}")
        self._cache_id: str | None = None

    def _baseline(self) -> Path | None:
        if not self.rescale:
            return None
        if self.baseline_path is not None:
            return Path(self.baseline_path)
        if Path(self.model).expanduser().exists():
            return None
        return shipped_baseline(self.model)

    def available(self) -> tuple[bool, str]:
        """Whether the model is here (or may be downloaded) and, when rescaling, whether its
        baseline file exists (a local model folder has none unless one is given).

        Returns:
            (True, "") or (False, what is missing and which flag or command fixes it).
        """
        from rrg_review.model.hub import cached, offline

        if self.rescale:
            baseline = self._baseline()
            if baseline is None:
                return False, (f"{self.model}: a local model folder needs a rescaling baseline "
                               "file (--bertscore-baseline FILE) or --no-rescale")
            if not baseline.is_file():
                return False, (f"no rescaling baseline for {self.model} ({baseline} not found): "
                               "pass --bertscore-baseline FILE or --no-rescale")
        if cached(self.model) is None and (offline() or not self.download):
            return False, (f"{self.model} is not in the local Hugging Face cache and downloads "
                           "are off; run `rrg-review models --fetch-metrics` with network access")
        return True, ""

    def _resolved(self) -> ResolvedModel:
        from rrg_review.model.hub import resolve

        return resolve(self.model, download=self.download)

    def cache_id(self) -> str:
        """The model id plus a hash of its files, the baseline, the hub revision and the
        layer (computed once; may download the model).

        Returns:
            The cache identity.

        Raises:
            MetricUnavailable: the resolved model folder holds no model files.
        """
        if self._cache_id is None:
            from rrg_review.metrics.fingerprint import FileHasher, cache_id, model_folder_files

            found = self._resolved()
            files = model_folder_files(found.path)
            if not files:
                raise MetricUnavailable(f"{self.model}: no model files in {found.path}")
            baseline = self._baseline()
            digest = FileHasher().files(files + ([baseline] if baseline else []),
                                        found.revision, str(self.num_layers))
            self._cache_id = cache_id(self.model, digest)
        return self._cache_id

    def _build(self) -> BERTScorer:
        from bert_score import BERTScorer

        path = str(self._resolved().path)
        baseline = self._baseline()
        return BERTScorer(model_type=path, num_layers=self.num_layers,
                          batch_size=self.batch_size, idf=False, lang="en",
                          rescale_with_baseline=self.rescale,
                          baseline_path=str(baseline) if baseline else None, device=self.device)

    def _prepare(self, texts: Sequence[str]) -> list[str]:
        if self.collapse_spaces:
            return [re.sub(r" +", " ", t) for t in texts]
        return list(texts)

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """BERTScore F1 per pair (IDF off; rescaled with the baseline unless turned off).

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {key: F1}; rescaled values may fall below 0. Empty for no pairs
            (the model is not loaded then).

        Raises:
            MetricUnavailable: the model cannot be loaded here.
        """
        if not hyps:
            return []
        scorer = self._load()
        # bert-score sorts by length internally and batches; F1 per pair comes back in order
        _, _, f1 = scorer.score(self._prepare(hyps), self._prepare(refs),
                                batch_size=self.batch_size)
        return [{self.keys[0]: float(v)} for v in f1.tolist()]


@METRICS.metric
class RexrankBertScore(BertScore):
    """The ReXrank / RadCliQ-v1 BERTScore (see the module docstring). `model` and
    `baseline_path` exist for tests with tiny local RoBERTa models; the key stays
    `bertscore_rexrank` only for the real configuration."""

    name = "bertscore_rexrank"
    keys = ("bertscore_rexrank",)
    reference = ("CXR-Report-Metric run_eval.py add_bertscore_col (distilroberta-base, "
                 "rescaled, IDF off, spaces collapsed)")

    def __init__(self, device: str | None = None, download: bool = True,
                 model: str = REXRANK_MODEL, baseline_path: str | None = None) -> None:
        real = model == REXRANK_MODEL and baseline_path is None
        super().__init__(model, REXRANK_LAYERS, rescale=True, baseline_path=baseline_path,
                         batch_size=256, device=device, download=download,
                         collapse_spaces=True,
                         key="bertscore_rexrank" if real else f"bertscore_rexrank[{model}]")

    @classmethod
    def from_config(cls, config: MetricConfig) -> BertScore:
        """Args:
            config: only its device and download settings apply (the configuration is fixed).

        Returns:
            The metric, not loaded.
        """
        return cls(config.device, config.download)


def rexrank_bertscore(device: str | None = None, download: bool = True,
                      model: str = REXRANK_MODEL, baseline_path: str | None = None
                      ) -> BertScore:
    """The ReXrank BERTScore (a `RexrankBertScore`).

    Args:
        device: the torch device; None: bert-score's choice.
        download: whether the model may be downloaded.
        model: the model (tests pass a tiny local one; the key then names it).
        baseline_path: the rescaling baseline; None: the one shipped with bert-score.

    Returns:
        The metric, not loaded.
    """
    return RexrankBertScore(device, download, model, baseline_path)
