"""F1-RadGraph via the `radgraph` package: `radgraph-xl` annotations, rewards at all three levels.

Keys: `radgraph_simple`, `radgraph_partial` (the RRG24 headline, "RG_ER") and
`radgraph_complete`. Values equal `F1RadGraph(reward_level="all", model_type="radgraph-xl")`:
the package's own model annotates, the package's own `compute_reward` scores each pair, and a pair
with an empty hypothesis or reference scores 0 at every level (as the package does). Each distinct
text is annotated once per call, which is where the time goes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rrg_review.metrics.base import MetricUnavailable, ModelMetric, Payload
from rrg_review.metrics.store import METRICS

if TYPE_CHECKING:
    from rrg_review.metrics.config import MetricConfig

log = logging.getLogger(__name__)

ARCHIVES = {"radgraph": "radgraph.tar.gz", "radgraph-xl": "radgraph-xl.tar.gz"}
REPO = "StanfordAIMI/RRG_scorers"


if TYPE_CHECKING:  # the radgraph package loads only when the metric runs
    from radgraph import RadGraph


def default_cache_dir() -> Path:
    """Where the radgraph package keeps its models (appdirs cache / package version).

    Returns:
        The folder (it may not exist yet).
    """
    from appdirs import user_cache_dir

    return Path(user_cache_dir("radgraph")) / version("radgraph")


@METRICS.metric
class RadGraphF1(ModelMetric["RadGraph"]):
    name = "radgraph"
    chunk = None  # one call: each distinct text is embedded once, batches length-sorted
    keys: tuple[str, ...] = ("radgraph_simple", "radgraph_partial", "radgraph_complete")
    reference = "radgraph 0.1.18 F1RadGraph(reward_level='all', model_type='radgraph-xl')"

    @classmethod
    def from_config(cls, config: MetricConfig) -> RadGraphF1:
        """Args:
            config: the run's settings (model cache folder, device, download allowed); the
                model is always radgraph-xl, as RRG24 scores.

        Returns:
            The metric, not loaded.
        """
        return cls("radgraph-xl", config.radgraph_cache_dir, config.device, config.download)

    def __init__(self, model_type: str = "radgraph-xl", model_cache_dir: str | None = None,
                 device: str | None = None, download: bool = True) -> None:
        if model_type not in ARCHIVES:
            raise ValueError(f"unknown RadGraph model {model_type!r} ({', '.join(ARCHIVES)})")
        self.model_type = model_type
        self.model_id = model_type
        self.cache_dir = Path(model_cache_dir) if model_cache_dir else default_cache_dir()
        self.device = device
        self.download = download
        self.version = f"radgraph-{version('radgraph')}-{model_type}-all"
        self._cache_id: str | None = None

    def cache_id(self) -> str:
        """A content hash of every file of the unpacked model folder (the package downloads
        by name into a cache folder, so the folder, not the name, says which weights ran).

        Returns:
            The cache identity (computed once; loading the model first when its folder is
            empty, which may download it).

        Raises:
            MetricUnavailable: the model cannot be loaded, or its folder stays empty.
        """
        if self._cache_id is None:
            from rrg_review.metrics.fingerprint import FileHasher, all_files, cache_id

            if not (self.model_dir.is_dir() and any(self.model_dir.iterdir())):
                self._load()  # the package downloads and unpacks its archive
            files = all_files(self.model_dir)
            if not files:
                raise MetricUnavailable(f"{self.model_type}: no files in {self.model_dir}")
            self._cache_id = cache_id(self.model_type, FileHasher().files(files))
        return self._cache_id

    @property
    def model_dir(self) -> Path:
        return self.cache_dir / self.model_type

    def available(self) -> tuple[bool, str]:
        """Whether the unpacked model is here, or may be downloaded.

        Returns:
            (True, "") or (False, where the weights are missing and how to fetch them).
        """
        from rrg_review.model.hub import offline

        if self.model_dir.is_dir() and any(self.model_dir.iterdir()):
            return True, ""
        if offline() or not self.download:
            return False, (f"{self.model_type} weights are not in {self.model_dir} and "
                           "downloads are off; run `rrg-review models --fetch-metrics`")
        return True, ""

    def _build(self) -> RadGraph:
        from radgraph import RadGraph

        cuda = -1
        if self.device and self.device.startswith("cuda"):
            cuda = int(self.device.split(":")[1]) if ":" in self.device else 0
        elif self.device is None:
            import torch

            cuda = 0 if torch.cuda.is_available() else -1
        try:
            return RadGraph(model_type=self.model_type, cuda=cuda,
                            model_cache_dir=str(self.cache_dir))
        except Exception as exc:  # download refused, corrupt archive, missing BERT
            log.warning("%s could not be loaded", self.model_type, exc_info=True)
            raise MetricUnavailable(f"{self.model_type} could not be loaded: "
                                    f"{type(exc).__name__}: {exc}") from exc

    def annotate(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """RadGraph annotations of each text, computing each distinct text once.

        Args:
            texts: reports; an empty text is not run and gets an annotation with no entities.

        Returns:
            One annotation dict ("text", "entities", ...) per text, in order.

        Raises:
            MetricUnavailable: the model cannot be loaded here.
        """
        unique = list(dict.fromkeys(t for t in texts if t))
        found: dict[str, dict[str, Any]] = {}
        if unique:
            result = self._load()(unique)
            found = {text: result[str(i)] for i, text in enumerate(unique)}
        return [found.get(t, {"text": "", "entities": {}}) for t in texts]

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """RadGraph F1 per pair at the three reward levels (radgraph's `compute_reward`).

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {radgraph_simple, radgraph_partial, radgraph_complete}, each in [0, 1];
            all 0 when either text is empty.
        """
        from radgraph.rewards import compute_reward

        notes = self.annotate(list(hyps) + list(refs))
        out = []
        for i, (hyp, ref) in enumerate(zip(hyps, refs, strict=True)):
            if not hyp or not ref:
                rewards = (0.0, 0.0, 0.0)
            else:
                rewards = compute_reward(notes[i], notes[len(hyps) + i], "all")
            out.append(dict(zip(self.keys, map(float, rewards), strict=True)))
        return out



Entity = tuple[str, str]  # (tokens, label)
Relation = tuple[Entity, Entity, str]  # (source, target, relation type)


def entity_relation_sets(annotation: dict[str, Any]) -> tuple[set[Entity], set[Relation]]:
    """Entities as {(tokens, label)} and relations as {((tokens, label) of the source,
    (tokens, label) of the target, relation type)}, as CXR-Report-Metric's
    `radgraph_evaluate_model.py::parse_entity_relation` builds them.

    Args:
        annotation: one RadGraph annotation (no "entities": empty sets).

    Returns:
        (entities, relations).
    """
    entities = annotation.get("entities", {})
    ents = {(e["tokens"], e["label"]) for e in entities.values()}
    rels: set[Relation] = set()
    for e in entities.values():
        for relation in e["relations"]:
            target = entities[relation[1]]
            rels.add(((e["tokens"], e["label"]), (target["tokens"], target["label"]),
                      relation[0]))
    return ents, rels


def set_f1(test: set[Any], retrieved: set[Any]) -> float:
    """F1 of two sets as the reference's `compute_f1(test, retrieved)` (0 when either side has
    nothing to match).

    Args:
        test: the reference's items.
        retrieved: the hypothesis' items.

    Returns:
        F1 in [0, 1]; 0 when either set is empty (two empty sets too).
    """
    tp = len(test & retrieved)
    precision = tp / len(retrieved) if retrieved else 0.0
    recall = tp / len(test) if test else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall else 0.0


@METRICS.metric
class RadGraphCombined(RadGraphF1):
    """RadGraph combined (`radgraph_combined`, a RadCliQ-v1 input): per report the mean of the
    entity F1 and the relation F1 between reference and hypothesis annotations
    (CXR-Report-Metric `run_eval.py::add_radgraph_col` over `evaluate_radgraph`'s two scores),
    annotated by the original `radgraph` model (not radgraph-xl) of the radgraph package."""

    name = "radgraph_combined"
    keys = ("radgraph_combined",)
    reference = ("CXR-Report-Metric radgraph_evaluate_model.py compute_f1 / "
                 "parse_entity_relation; radgraph package 'radgraph' model annotates")

    @classmethod
    def from_config(cls, config: MetricConfig) -> RadGraphCombined:
        """Args:
            config: the run's settings (model cache folder, device, download allowed).

        Returns:
            The metric, not loaded.
        """
        return cls(config.radgraph_cache_dir, config.device, config.download)

    def __init__(self, model_cache_dir: str | None = None, device: str | None = None,
                 download: bool = True, model_type: str = "radgraph") -> None:
        super().__init__(model_type, model_cache_dir, device, download)
        self.version = f"radgraph-{version('radgraph')}-{model_type}-combined-1"

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {"radgraph_combined": `combined_f1`} (0 when either text is empty).
        """
        notes = self.annotate(list(hyps) + list(refs))
        n = len(hyps)
        return [{"radgraph_combined": combined_f1(notes[n + i], notes[i])} for i in range(n)]


def combined_f1(reference: dict[str, Any], hypothesis: dict[str, Any]) -> float:
    """RadGraph combined for one report: the mean of entity F1 and relation F1.

    Args:
        reference: the reference's annotation.
        hypothesis: the hypothesis' annotation.

    Returns:
        A value in [0, 1] (a report with entities but no relations on both sides gets at
        most 0.5).
    """
    ref_ents, ref_rels = entity_relation_sets(reference)
    hyp_ents, hyp_rels = entity_relation_sets(hypothesis)
    return (set_f1(ref_ents, hyp_ents) + set_f1(ref_rels, hyp_rels)) / 2
