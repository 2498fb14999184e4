"""The evaluation of a review session as typed, frozen results: the rows of the session and one
record type per step (automatic metrics, paired model comparisons, radiologist review, edits,
agreement). The HTML, CSV and JSON writers read these; nothing here queries or computes, so the
writers and the steps that fill these records import this module and never each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date

from rrg_review.metrics.stats import PairedResult

COMPARISONS = ("draft_vs_reference", "final_vs_reference", "draft_vs_final")


@dataclass(frozen=True)
class ExportFilters:
    """What an export covers; every field None means everything."""

    model: str | None = None
    reader: str | None = None
    source: str | None = None
    since: date | None = None
    dataset_keys: bool = False  # the datasets' own study keys instead of opaque ids (admins)


@dataclass(frozen=True)
class ReviewRow:
    """One (study, section, model, reader): the texts, the reader's rating and the metrics of
    each comparison (`metrics[comparison][key]`, filled by the scoring step)."""

    study_id: int
    source: str
    study_key: str  # the dataset's key, or an opaque keyed id
    split: str | None
    section: str
    preset: str
    model_id: str
    model_revision: str | None
    reader: str | None
    draft: str
    final: str | None
    reference: str | None
    likert: int | None = None
    acceptable: bool | None = None
    errors: dict[str, dict[str, int]] = field(default_factory=dict)
    # the counts the reader's edit suggested when they rated (issue #22); None: none stored
    suggested: dict[str, int] | None = None
    comment: str | None = None
    # whether the study has a prior in the database (None: no study date to tell by)
    has_prior: bool | None = None
    active_seconds: float | None = None
    rated_at: str | None = None
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def significant_errors(self) -> int:
        return sum(c.get("significant", 0) for c in self.errors.values())

    @property
    def all_errors(self) -> int:
        return sum(c.get("significant", 0) + c.get("insignificant", 0)
                   for c in self.errors.values())

    def metric(self, comparison: str, key: str) -> float | None:
        """One metric value of this row, None-safe for rows a comparison did not score.

        Args:
            comparison: "draft_vs_reference", "final_vs_reference" or "draft_vs_final".
            key: a metric key.

        Returns:
            The value, or None when that comparison or key was not scored for this row.
        """
        return self.metrics.get(comparison, {}).get(key)


@dataclass(frozen=True)
class ModelInfo:
    preset: str
    model_id: str
    revision: str | None
    studies: int


@dataclass(frozen=True)
class AutomaticResult:
    """A metric's corpus value for one model and section, over all sources or one."""

    model: str
    section: str
    source: str  # "all" or one source
    key: str
    value: float
    ci: tuple[float | None, float | None]  # bootstrap 95% CI (None for per-source values)
    n: int


@dataclass(frozen=True)
class PairedComparison:
    """Model A against model B on the studies both drafted (approximate randomization)."""

    section: str
    model_a: str
    model_b: str
    result: PairedResult  # key, a, b, a - b, p, n


@dataclass(frozen=True)
class ModelReview:
    """What the readers said about one model's drafts (each rating counted once)."""

    ratings: int
    likert: dict[str, int]  # "1".."5" -> count
    accepted_share: float
    errors: dict[str, dict[str, int]]  # ReXVal category -> significant/insignificant -> count
    active_minutes_mean: float


@dataclass(frozen=True)
class TimeOnTask:
    """Mean active minutes on rated studies with a draft and without one."""

    with_draft_minutes: float | None
    n_with_draft: int
    without_draft_minutes: float | None
    n_without_draft: int


@dataclass(frozen=True)
class ReviewSummary:
    models: dict[str, ModelReview]
    time_on_task: TimeOnTask


@dataclass(frozen=True)
class EditSummary:
    """How much readers changed one model's drafts of one section."""

    model: str
    section: str
    n: int
    word_error_rate: float  # mean WER of the final against the draft (metrics.edits)
    unchanged_share: float
    draft_vs_final: dict[str, float]  # metric key -> mean


@dataclass(frozen=True)
class MetricAgreement:
    """Kendall's tau-b of a metric against the readers' error counts (the ReXVal method)."""

    metric: str
    against: str  # "significant errors" | "all errors"
    statistic: str
    value: float
    p_value: float | None
    n: int


@dataclass(frozen=True)
class ReaderAgreement:
    on: str  # "Likert" | "error count"
    statistic: str
    value: float
    p_value: float | None
    n: int


@dataclass(frozen=True)
class SuggestionAgreement:
    """How the counts suggested from readers' edits agree with the counts they confirmed, for
    one ReXVal category over the ratings that stored a suggestion (issue #22).

    suggested/confirmed: the summed counts; exact: the share of ratings whose count equals the
    suggestion; kappa: Cohen's kappa (unweighted, statsmodels) of "this category has an error"
    as suggested vs as confirmed: 0 where one side never varies, NaN where it is undefined
    (both sides constant, n < 2)."""

    category: str
    n: int
    suggested: int
    confirmed: int
    exact: float
    kappa: float
    p_value: float | None


@dataclass(frozen=True)
class FlagOutcome:
    """What readers did with the draft sentences one kind of flag marks (issue #22), over `n`
    reviewed sections: `flagged` draft sentences carried the flag, `edited` draft sentences
    were changed or removed by their reader, `both` were flagged and edited. Precision (of the
    flag against what readers did) is both / flagged, recall both / edited."""

    kind: str
    n: int
    flagged: int
    edited: int
    both: int

    @property
    def precision(self) -> float:
        return self.both / self.flagged if self.flagged else float("nan")

    @property
    def recall(self) -> float:
        return self.both / self.edited if self.edited else float("nan")


@dataclass(frozen=True)
class CaseList:
    """A few rows worth reading: worst/best by the headline metric or by rating."""

    title: str
    rows: tuple[ReviewRow, ...]


@dataclass(frozen=True)
class Evaluation:
    generated_at: str
    filters: dict[str, str | None]
    rows: tuple[ReviewRow, ...]
    models: tuple[ModelInfo, ...]
    sources: dict[str, int]  # source -> studies
    readers: tuple[str, ...]
    automatic: tuple[AutomaticResult, ...]
    paired: tuple[PairedComparison, ...]
    unavailable: dict[str, str]  # metric key -> why it could not run
    review: ReviewSummary
    edits: tuple[EditSummary, ...]
    metric_agreement: tuple[MetricAgreement, ...]
    reader_agreement: tuple[ReaderAgreement, ...]
    cases: tuple[CaseList, ...]
    headline: str | None  # the metric that ranks the cases (first available of HEADLINE)
    suggestion_agreement: tuple[SuggestionAgreement, ...] = ()
    flag_outcomes: tuple[FlagOutcome, ...] = ()
