"""Metrics by name, created lazily (nothing heavy is imported until a metric computes)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rrg_review.core.registry import LazyRegistry
from rrg_review.metrics.base import Metric


@dataclass(frozen=True)
class MetricConfig:
    device: str | None = None
    download: bool = True
    bertscore_model: str | None = None  # None: the official distilbert-base-uncased
    bertscore_layers: int | None = None
    bertscore_baseline: str | None = None
    bertscore_rescale: bool = True
    radgraph_cache_dir: str | None = None
    chexbert_weights: str | None = None  # a chexbert.pth; None: the hub's copy
    chexbert_backbone: str | None = None
    workers_dir: Path | None = None  # metric workers' virtualenvs; None: the user's cache


# each metric class builds itself from the config (Metric.from_config), imported only when built
METRICS = LazyRegistry("metric", {
    "bleu4": "rrg_review.metrics.bleu:Bleu4", "rougeL": "rrg_review.metrics.rouge:RougeL",
    "bertscore": "rrg_review.metrics.bertscore:BertScore",
    "radgraph": "rrg_review.metrics.radgraph:RadGraphF1",
    "chexbert": "rrg_review.metrics.chexbert:CheXbertF1", "bleu2": "rrg_review.metrics.bleu:Bleu2",
    "bertscore_rexrank": "rrg_review.metrics.bertscore:RexrankBertScore",
    "semb_score": "rrg_review.metrics.chexbert:SembScore",
    "radgraph_combined": "rrg_review.metrics.radgraph:RadGraphCombined",
})
# composites: built from the metrics above (shared instances, so each model loads once)
COMPOSITES = {"radcliq_v1": ("radgraph_combined", "bertscore_rexrank", "semb_score", "bleu2")}
WORKER_METRICS = ("ratescore", "green")  # run in their own virtualenv (metrics/worker_client.py)
# the keys each metric reports, so a user may ask for `radgraph_partial` and get its metric
KEY_TO_METRIC = {
    "bleu4": "bleu4", "rougeL": "rougeL", "bertscore": "bertscore",
    "radgraph_simple": "radgraph", "radgraph_partial": "radgraph", "radgraph_complete": "radgraph",
    "chexbert_5_micro_f1": "chexbert", "chexbert_all_micro_f1": "chexbert",
    "chexbert_5_macro_f1": "chexbert", "chexbert_all_macro_f1": "chexbert",
    "bleu2": "bleu2", "bertscore_rexrank": "bertscore_rexrank", "semb_score": "semb_score",
    "radgraph_combined": "radgraph_combined", "radcliq_v1": "radcliq_v1",
    "inv_radcliq_v1": "radcliq_v1", "ratescore": "ratescore", "green": "green",
}
RRG24 = ("bleu4", "rougeL", "bertscore", "radgraph", "chexbert")
REXRANK = ("radcliq_v1", "bleu2", "bertscore_rexrank", "semb_score", "radgraph_combined",
           "ratescore", "green")
SETS = {"rrg24": RRG24, "rexrank": REXRANK}
# the number each set ranks by (the HTML report marks it); RRG24 reports each metric on its own
HEADLINE = {"rrg24": ("bleu4", "rougeL", "bertscore", "radgraph_partial", "chexbert_5_micro_f1"),
            "rexrank": ("inv_radcliq_v1",)}
DEFAULT = RRG24
LOWER_IS_BETTER = ("radcliq_v1",)  # every other key: higher is better


def key_label(key: str) -> str:
    """A key as a report table shows it: direction, and whether it heads a set.

    Args:
        key: a metric key such as "radgraph_partial" (unknown keys read "higher is better").

    Returns:
        e.g. "inv_radcliq_v1 (higher is better; rexrank headline)".
    """
    arrow = "lower is better" if key in LOWER_IS_BETTER else "higher is better"
    heads = [name for name, keys in HEADLINE.items() if key in keys]
    return f"{key} ({arrow}" + "".join(f"; {h} headline" for h in heads) + ")"


def resolve_names(names: Sequence[str] | None) -> list[str]:
    """Metric names from set names, metric names or keys (e.g. 'rexrank' or
    'bleu4,radgraph_partial'), in a stable order.

    Args:
        names: set names ("rrg24", "rexrank"), metric names or keys, each one item (a
            comma-separated string is not split here); None or empty: the default set (RRG24).

    Returns:
        Metric names, each once, in the order first asked for.

    Raises:
        ValueError: a name is none of these; the message lists the known ones.
    """
    if not names:
        return list(DEFAULT)
    out: list[str] = []
    for raw in names:
        expanded = SETS.get(raw, (raw,))
        for item in expanded:
            name = KEY_TO_METRIC.get(item, item if item in METRICS else None)
            if name is None:
                raise ValueError(f"unknown metric {item!r}; known: "
                                 f"{', '.join([*SETS, *KEY_TO_METRIC])}")
            if name not in out:
                out.append(name)
    return out


def build(names: Sequence[str] | None = None, config: MetricConfig | None = None) -> list[Metric]:
    """Metrics by name; a composite's components are built once and shared with it (and are
    scored only for it unless asked for).

    Args:
        names: as for `resolve_names`; None: the default set.
        config: the run's metric settings; None: the defaults.

    Returns:
        One metric per resolved name, in order, none loaded yet (components of a composite are
        not in the list unless asked for).

    Raises:
        ValueError: an unknown name (from `resolve_names`).
    """
    cfg = config or MetricConfig()
    wanted = resolve_names(names)
    made: dict[str, Metric] = {}

    def make(name: str) -> Metric:
        if name not in made:
            if name in COMPOSITES:
                from rrg_review.metrics.radcliq import RadCliQ

                made[name] = RadCliQ([make(part) for part in COMPOSITES[name]])
            elif name in WORKER_METRICS:
                from rrg_review.metrics.worker_client import worker_metric

                made[name] = worker_metric(name, cfg)
            else:
                made[name] = METRICS.load(name).from_config(cfg)
        return made[name]

    return [make(n) for n in wanted]
