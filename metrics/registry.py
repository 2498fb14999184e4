"""Metrics by name, created lazily (nothing heavy is imported until a metric computes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from metrics.base import Metric


@dataclass(frozen=True)
class MetricConfig:
    device: str | None = None
    download: bool = True
    bertscore_model: str | None = None  # None: the official distilbert-base-uncased
    bertscore_layers: int | None = None
    bertscore_baseline: str | None = None
    bertscore_rescale: bool = True
    radgraph_cache_dir: str | None = None
    chexbert_weights: str | None = None
    chexbert_backbone: str | None = None


def _bleu(cfg: MetricConfig) -> Metric:
    from metrics.bleu import Bleu4

    return Bleu4()


def _rouge(cfg: MetricConfig) -> Metric:
    from metrics.rouge import RougeL

    return RougeL()


def _bertscore(cfg: MetricConfig) -> Metric:
    from metrics.bertscore import OFFICIAL_LAYERS, OFFICIAL_MODEL, BertScore

    return BertScore(cfg.bertscore_model or OFFICIAL_MODEL, cfg.bertscore_layers or OFFICIAL_LAYERS,
                     cfg.bertscore_rescale, cfg.bertscore_baseline, device=cfg.device,
                     download=cfg.download)


def _radgraph(cfg: MetricConfig) -> Metric:
    from metrics.radgraph import RadGraphF1

    return RadGraphF1("radgraph-xl", cfg.radgraph_cache_dir, cfg.device, cfg.download)


def _chexbert(cfg: MetricConfig) -> Metric:
    from metrics.chexbert import BACKBONE, CheXbertF1

    return CheXbertF1(cfg.chexbert_weights, cfg.chexbert_backbone or BACKBONE, cfg.device,
                      download=cfg.download)


FACTORIES: dict[str, Callable[[MetricConfig], Metric]] = {
    "bleu4": _bleu, "rougeL": _rouge, "bertscore": _bertscore, "radgraph": _radgraph,
    "chexbert": _chexbert,
}
# the keys each metric reports, so a user may ask for `radgraph_partial` and get its metric
KEY_TO_METRIC = {
    "bleu4": "bleu4", "rougeL": "rougeL", "bertscore": "bertscore",
    "radgraph_simple": "radgraph", "radgraph_partial": "radgraph", "radgraph_complete": "radgraph",
    "chexbert_5_micro_f1": "chexbert", "chexbert_all_micro_f1": "chexbert",
    "chexbert_5_macro_f1": "chexbert", "chexbert_all_macro_f1": "chexbert",
}
DEFAULT = ("bleu4", "rougeL", "bertscore", "radgraph", "chexbert")


def resolve_names(names: Sequence[str] | None) -> list[str]:
    """Metric names from names or keys (e.g. 'bleu4,radgraph_partial'), in a stable order."""
    if not names:
        return list(DEFAULT)
    out = []
    for raw in names:
        name = KEY_TO_METRIC.get(raw, raw if raw in FACTORIES else None)
        if name is None:
            raise ValueError(f"unknown metric {raw!r}; known: {', '.join(KEY_TO_METRIC)}")
        if name not in out:
            out.append(name)
    return out


def build(names: Sequence[str] | None = None, config: MetricConfig | None = None) -> list[Metric]:
    cfg = config or MetricConfig()
    return [FACTORIES[n](cfg) for n in resolve_names(names)]
