"""The one small Metric interface, and the helpers every metric shares."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np

if TYPE_CHECKING:
    from rrg_review.metrics.config import MetricConfig

Payload = dict[str, Any]  # what one (hypothesis, reference) pair costs to compute: cached as JSON


class MetricUnavailable(RuntimeError):
    """The metric cannot run here (weights missing offline, package absent); says why and how."""


def by_reason(unavailable: Mapping[str, str]) -> dict[str, list[str]]:
    """Unavailable metric keys grouped by their reason (reason -> keys, in first-seen order),
    so one missing model is said once for all the keys it provides.

    Args:
        unavailable: metric key -> why it cannot run.
    Returns:
        reason -> the keys it holds back.
    """
    reasons: dict[str, list[str]] = {}
    for key, why in unavailable.items():
        reasons.setdefault(why, []).append(key)
    return reasons


def text_hash(text: str) -> str:
    """The cache's key for one text, so a pair is found again whatever list it arrives in.

    Args:
        text: a hypothesis or reference, exactly as scored (no normalisation).

    Returns:
        The SHA-256 of its UTF-8 bytes, as 64 hex digits.
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Metric(ABC):
    """Texts in, numbers out.

    `compute` does the expensive per-pair work and returns JSON-able payloads (these are cached);
    `matrix` turns payloads into a numeric array (one row per pair) from which `per_sample` and
    `corpus` are computed, so confidence intervals can resample rows without recomputing anything.
    Metrics whose corpus value is the mean of per-sample values only implement `compute`.
    """

    name: str  # registry name, and the cache's metric column
    keys: tuple[str, ...]  # the numbers it reports (e.g. radgraph_simple, radgraph_partial, ...)
    version: str  # changes whenever values could change (package version, settings)
    model_id: str = ""  # the model behind the numbers, when there is one
    # pairs per compute() call; None = all missing pairs at once (model metrics that dedupe and
    # length-sort texts across the whole call, which chunking would defeat)
    chunk: int | None = 2048
    # "higher" or "lower" is better, per key; keys not listed are "higher"
    directions: ClassVar[dict[str, str]] = {}
    reference: str = ""  # the reference implementation the values equal (README's table)

    @classmethod
    def from_config(cls, config: MetricConfig) -> Metric:
        """The metric as the registry builds it from the run's settings (metrics that have
        none are built with their defaults; those with a model override this).

        Args:
            config: the run's metric settings (device, weights, download allowed).

        Returns:
            A new, not yet loaded metric.
        """
        return cls()

    def direction(self, key: str) -> str:
        """Which way is better for one of this metric's numbers, for readers of a report.

        Args:
            key: one of `keys`.

        Returns:
            "higher" or "lower"; "higher" for any key not listed in `directions`.
        """
        return self.directions.get(key, "higher")

    def cache_id(self) -> str:
        """What the cache keys values on besides name and version: the model id and, for model
        metrics, a content hash of the weight/baseline files and the hub revision, so other
        weights never return earlier values. Called only once the metric is available; may
        resolve (download) the files.

        Returns:
            The cache identity; the base class returns `model_id` ("" for model-free metrics).
        """
        return self.model_id

    def available(self) -> tuple[bool, str]:
        """Whether the metric can run here, asked before any work so a missing model is
        reported with its reason instead of crashing a run.

        Returns:
            (True, "") or (False, the reason and how to fix it), without loading the model.
        """
        return True, ""

    @abstractmethod
    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """The expensive per-pair work; its payloads are what the score cache keeps.

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            One JSON-able payload per pair, in order (an empty list for no pairs).
        """

    def matrix(self, payloads: Sequence[Payload]) -> np.ndarray:
        """Payloads as numbers, so statistics can resample rows without recomputing.

        Args:
            payloads: what `compute` returned (or the cache kept), one per pair.

        Returns:
            A float array with one row per payload and one column per key (0 rows when empty).
        """
        return np.array([[p[k] for k in self.keys] for p in payloads], dtype=np.float64).reshape(
            len(payloads), len(self.keys))

    def per_sample(self, m: np.ndarray) -> dict[str, np.ndarray]:
        """Each key's value per pair (the base class: the matrix's columns).

        Args:
            m: the matrix from `matrix` (or some of its rows, as a bootstrap draws them).

        Returns:
            key -> one value per row of `m`.
        """
        return {k: m[:, i] for i, k in enumerate(self.keys)}

    def corpus(self, m: np.ndarray) -> dict[str, float]:
        """The corpus value of each key (the base class: the mean of the per-sample values);
        metrics whose corpus value is not a mean, such as BLEU, override this.

        Args:
            m: the matrix from `matrix`, or a resample of its rows.

        Returns:
            key -> value; NaN for every key when `m` has no rows.
        """
        return {k: float(v.mean()) if len(v) else float("nan")
                for k, v in self.per_sample(m).items()}

    def close(self) -> None:  # noqa: B027 - optional hook, most metrics hold no model
        """Free the model, if any."""


ModelT = TypeVar("ModelT")


class ModelMetric(Metric, Generic[ModelT]):
    """A metric backed by a model loaded on first use: `available()` is asked first (its reason
    raised as MetricUnavailable), `_build` runs once, `close` frees the model."""

    _model: ModelT | None = None

    def _load(self) -> ModelT:
        if self._model is None:
            ok, why = self.available()
            if not ok:
                raise MetricUnavailable(why)
            self._model = self._build()
        return self._model

    @abstractmethod
    def _build(self) -> ModelT:
        """Load the model (imports of torch and the metric package belong here)."""

    def close(self) -> None:
        """Drop the model (its memory is freed once nothing else holds it); the next use
        loads it again."""
        self._model = None
