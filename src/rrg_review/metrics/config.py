"""The run's metric settings, in a module of their own: every metric builds itself from one
(`Metric.from_config`) and the registry passes it down, so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MetricConfig:
    device: str | None = None
    download: bool = True  # app.settings decides it (no network: False)
    bertscore_model: str | None = None  # None: the official distilbert-base-uncased
    bertscore_layers: int | None = None
    bertscore_baseline: str | None = None
    bertscore_rescale: bool = True
    radgraph_cache_dir: str | None = None
    chexbert_weights: str | None = None  # a chexbert.pth; None: the hub's copy
    chexbert_backbone: str | None = None
    workers_dir: Path | None = None  # metric workers' virtualenvs; None: the user's cache
