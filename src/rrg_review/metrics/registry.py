"""Metrics by name, created lazily (nothing heavy is imported until a metric computes).

Each metric registers itself where it is defined (metrics/store.py), with its keys and
directions; this module imports the metric modules (light: their models, torch and metric
packages load only when a metric computes) and derives from them which metric reports a key
and which keys are lower-is-better, so the two never disagree with the classes.
"""

from __future__ import annotations

from collections.abc import Sequence

from rrg_review.metrics import (  # noqa: F401 - imported for their registrations
    bertscore,
    bleu,
    chexbert,
    radcliq,
    radgraph,
    rouge,
    worker_client,
)
from rrg_review.metrics.base import Metric
from rrg_review.metrics.config import MetricConfig
from rrg_review.metrics.store import METRICS

__all__ = ["DEFAULT", "HEADLINE", "KEY_TO_METRIC", "LOWER_IS_BETTER", "METRICS", "REXRANK",
           "RRG24", "SETS", "MetricConfig", "build", "key_label", "resolve_names"]

# the keys each metric reports, so a user may ask for `radgraph_partial` and get its metric
KEY_TO_METRIC = {key: d.name for d in METRICS for key in d.keys}
LOWER_IS_BETTER = tuple(key for d in METRICS for key in d.lower_is_better)  # others: higher
RRG24 = ("bleu4", "rougeL", "bertscore", "radgraph", "chexbert")
REXRANK = ("radcliq_v1", "bleu2", "bertscore_rexrank", "semb_score", "radgraph_combined",
           "ratescore", "green")
SETS = {"rrg24": RRG24, "rexrank": REXRANK}
# the number each set ranks by (the HTML report marks it); RRG24 reports each metric on its own
HEADLINE = {"rrg24": ("bleu4", "rougeL", "bertscore", "radgraph_partial", "chexbert_5_micro_f1"),
            "rexrank": ("inv_radcliq_v1",)}
DEFAULT = RRG24


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
            definition = METRICS[name]
            if definition.compose is not None:
                made[name] = definition.compose([make(part) for part in definition.components])
            else:
                assert definition.build is not None  # noqa: S101 - no components: a builder
                made[name] = definition.build(cfg)
        return made[name]

    return [make(n) for n in wanted]
