"""The metrics panel of one open study: draft vs reference, final edit vs reference, draft vs
final edit, per section, with every metric that can run here (cached in the database)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rrg_review.db.engine import Database
from rrg_review.db.metric_cache import DatabaseScoreCache
from rrg_review.metrics.base import Metric
from rrg_review.metrics.registry import MetricConfig, build
from rrg_review.metrics.scoring import score

COMPARISONS = ("draft vs reference", "final vs reference", "draft vs final")


@dataclass(frozen=True)
class PanelRow:
    section: str
    comparison: str
    values: dict[str, float]


@dataclass(frozen=True)
class MetricsPanel:
    rows: list[PanelRow] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # metric key -> why
    notes: list[str] = field(default_factory=list)  # e.g. "no reference findings"

    @property
    def keys(self) -> list[str]:
        return list(dict.fromkeys(k for r in self.rows for k in r.values))


class StudyMetrics:
    """Scores texts of one study; model metrics run only when their weights are here."""

    def __init__(self, db: Database, metrics: Sequence[Metric] | None = None,
                 config: MetricConfig | None = None) -> None:
        self.cache = DatabaseScoreCache(db)
        self.metrics = list(metrics) if metrics is not None else build(None, config)

    def panel(self, texts: dict[str, dict[str, str | None]]) -> MetricsPanel:
        """`texts[section]` holds 'draft', 'final' and 'reference' (any may be missing).

        Each section scores draft vs reference, final vs reference and draft vs final, each
        pair only when both texts are there (an empty reference or final counts as missing;
        an empty draft or final as hypothesis is scored). No bootstrap: one study has no CI.

        Args:
            texts: section -> {"draft", "final", "reference"} -> text or None.

        Returns:
            One row per scored (section, comparison) with its values (of the CheXbert keys only
            chexbert_all_micro_f1 is shown), the unavailable metrics with their reasons, and a
            note for each section without a reference.
        """
        rows: list[PanelRow] = []
        notes: list[str] = []
        unavailable: dict[str, str] = {}
        for section, t in texts.items():
            pairs = {
                "draft vs reference": (t.get("draft"), t.get("reference")),
                "final vs reference": (t.get("final"), t.get("reference")),
                "draft vs final": (t.get("draft"), t.get("final")),
            }
            if not t.get("reference"):
                notes.append(f"no reference {section}: only draft vs final is scored")
            wanted = [(c, h, r) for c, (h, r) in pairs.items() if h is not None and r]
            if not wanted:
                continue
            report = score([h for _, h, _ in wanted], [r for _, _, r in wanted], self.metrics,
                           self.cache, n_resamples=0)
            unavailable.update(report.unavailable)
            for i, (comparison, _, _) in enumerate(wanted):
                rows.append(PanelRow(section, comparison,
                                     {k: v[i] for k, v in report.per_sample.items()
                                      if not k.startswith("chexbert")} |
                                     {k: report.per_sample[k][i] for k in report.per_sample
                                      if k.startswith("chexbert_all_micro")}))
        return MetricsPanel(rows, unavailable, notes)
