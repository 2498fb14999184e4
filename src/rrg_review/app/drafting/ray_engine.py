"""Drafting a whole dataset on Ray Data: `rrg-review draft --engine ray`.

The driver only decides *which* studies (ids, length-sorted so a batch's studies are alike);
Ray Data streams the ids through `map_batches` with an actor pool, one model replica per actor
(`--workers N`, `--gpus-per-worker G`). Each actor reads its studies from the database, drafts
them with the same DraftingService the local engine uses, and stores every section (text or
error) per batch, in one transaction. An actor skips a study that already has its drafts, so a
run that was killed resumes where it stopped, with no duplicate and no gap, and Ray's own task
retries never store a study twice. Ray is an optional extra: `pip install rrg-review[scale]`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from rrg_review.app.drafting.service import DraftingService, DraftRun, RuntimeConfig
from rrg_review.app.settings import Settings
from rrg_review.core.progress import Progress

if TYPE_CHECKING:  # the metric code loads only when a scoring run asks for it
    from rrg_review.metrics.base import Metric, Payload
    from rrg_review.metrics.cache import Key, ScoreCache
    from rrg_review.metrics.registry import MetricConfig

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RayConfig:
    address: str | None = None  # a running cluster ("head:6379"), else see connect()
    workers: int = 1  # actors, one model replica each
    gpus_per_worker: float = 0.0
    batch_size: int = 8


def blocks_and_actors(rows: int, config: RayConfig) -> tuple[int, int]:
    """How many blocks `rows` rows are split into (one per batch of `config.batch_size`) and
    how many actors work on them: never more than there are blocks, since Ray Data gives an
    actor whole blocks and an actor with none still loads its model replica (on a cluster, a
    GPU's worth of weights loaded for nothing; a 4-study run with `--workers 2` started two
    actors, one of which never drafted).

    Args:
        rows: the rows to process (at least one).
        config: the batch size and the actors asked for.

    Returns:
        (blocks, actors), both at least 1.
    """
    blocks = max(1, -(-rows // config.batch_size))
    return blocks, max(1, min(config.workers, blocks))


def connect(ray: ModuleType, config: RayConfig) -> None:
    """Join the cluster this command is given, or start a local one whose workers run at this
    process's own priority; nothing when this process is connected already.

    The cluster given is `config.address` (`--address`), else the one Ray itself would join
    with no address: `RAY_ADDRESS`, or the cluster `ray start` runs on this machine (a GPU
    node's, say). A command on such a machine stopped with Ray's own traceback ("When
    connecting to an existing cluster, _system_config must not be provided"), since a local
    start's settings were passed to a cluster that already runs; and starting a second cluster
    beside it would hand its GPUs out twice.

    Ray starts its worker processes (the actors that draft and score) at niceness 15, below
    everything else on the machine. Beside two busy processes a 4-study draft on one Ray worker
    took 165 s against 5.3 s in process, and 64 BERTScore pairs 414 s against 1.9 s
    (`python -m bench.scale`): the workers are this command's work, not background chores, so
    a cluster started here runs them at the niceness of the command itself (`nice rrg-review
    draft ...` still lowers the lot). A cluster joined keeps its own setting."""
    if ray.is_initialized():
        return
    address = config.address or cluster_set_up_here()
    options: dict[str, Any] = {}
    if address is None:
        address = "local"  # a cluster of our own, also if `ray start` runs one meanwhile
        options["_system_config"] = {"worker_niceness": 0}  # relative to the raylet's, ours
    else:
        logger.info("joining the Ray cluster at %s", address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, configure_logging=False, **options)
    except ConnectionError as exc:  # (Ray tries for about 20 s first)
        raise RayUnavailable(
            f"cannot join the Ray cluster at {address}: {exc}; a cluster with token "
            "authentication (Ray's default) wants RAY_AUTH_MODE=token here too") from exc
    except Exception as exc:  # Ray's own start-up failures are bare Exceptions
        if address != "local":
            raise
        raise RayUnavailable(f"could not start a local Ray cluster: {exc}") from exc


def cluster_set_up_here() -> str | None:
    """The cluster Ray joins when given no address (`RAY_ADDRESS`, else the address `ray
    start` recorded in Ray's temporary folder on this machine), or None: a command then
    starts its own. Ray's own resolver, so the two never disagree (a Ray without it, outside
    the versions pyproject allows: RAY_ADDRESS alone)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:
        return os.environ.get("RAY_ADDRESS") or None
    # (None is "no address given", as ray.init reads it)
    address: str | None = canonicalize_bootstrap_address(None)
    return address


class RayUnavailable(RuntimeError):
    """Ray cannot be used: not installed (the `scale` extra), its cluster cannot be joined, or
    a local one does not start. Said to the user as one sentence."""


def _ray() -> ModuleType:
    try:
        import ray
        import ray.data
    except ImportError as exc:
        raise RayUnavailable("--engine ray needs Ray Data: pip install 'rrg-review[scale]'"
                             ) from exc
    module: ModuleType = ray  # (what Ray exports is Any to mypy: see pyproject.toml)
    return module


class DraftActor:
    """One model replica in a Ray actor: drafts a batch of study ids and stores the drafts."""

    def __init__(self, db_url: str, data_dir: str, runtime: dict[str, Any], preset: str,
                 sections: Sequence[str], redo: bool, key: str | None = None,
                 busy_timeout_s: float = 10.0) -> None:
        from pathlib import Path

        settings = Settings(db_url=db_url, data_dir=Path(data_dir), pseudonym_key=key,
                            busy_timeout_s=busy_timeout_s)
        self.service = DraftingService(settings.open_database(upgrade=False), settings,
                                       RuntimeConfig(**runtime))
        self.preset, self.sections, self.redo = preset, tuple(sections), redo

    def __call__(self, batch: dict[str, Any]
                 ) -> dict[str, list[int] | list[bool] | list[str]]:
        ids = [int(i) for i in batch["study_id"]]
        run = self.service.draft(ids, self.preset, self.sections, redo=self.redo,
                                 batch_size=len(ids))
        failed = {sid for sid, _, _ in run.errors}
        errors = {sid: f"{section}: {error}" for sid, section, error in run.errors}
        return {"study_id": ids,
                "failed": [sid in failed for sid in ids],
                "error": [errors.get(sid, "") for sid in ids],
                "drafted_sections": [run.drafted] + [0] * (len(ids) - 1),
                "failed_sections": [run.failed] + [0] * (len(ids) - 1),
                "skipped": [run.skipped] + [0] * (len(ids) - 1)}


def length_sorted(service: DraftingService, study_ids: Sequence[int]) -> list[int]:
    """Studies ordered by their number of images, then indication length: a batch's prompts
    are alike in size, so little is padded.

    Args:
        service: the drafting service (for its database).
        study_ids: the studies to order.

    Returns:
        The same ids, fewest images and shortest indication first (ties by id); unknown ids
        sort as having none.
    """
    from rrg_review.db.models import Image, Study

    with service.db.read() as session:
        images = dict(session.execute(select(Image.study_id, func.count(Image.id))
                                      .group_by(Image.study_id)).all())
        indication: dict[int, int] = dict(session.execute(select(Study.id, func.length(
            func.coalesce(Study.indication, "")))).all())
    return sorted(study_ids, key=lambda s: (images.get(s, 0), indication.get(s, 0), s))


def draft_on_ray(service: DraftingService, study_ids: Sequence[int], preset: str,
                 sections: Sequence[str], config: RayConfig, *, redo: bool = False,
                 progress: Progress | None = None) -> DraftRun:
    """Draft `study_ids` on Ray Data; the same drafts as DraftingService.draft, stored per batch.

    Args:
        service: the local drafting service (its database, settings and runtime are given to
            each Ray actor).
        study_ids: the studies to draft.
        preset: the preset name.
        sections: the sections to draft.
        config: the Ray cluster address, batch size, actors and GPUs per actor.
        redo: draft every study again; False: only those lacking a draft.
        progress: called with (studies done, studies to do).

    Returns:
        The combined counts and errors of every batch; no cluster is started when nothing is
        left to draft.

    Raises:
        UnknownPreset: no preset has this name (before any cluster starts).
    """
    ray = _ray()
    service.preset(preset)  # an unknown preset fails here, before any cluster starts
    todo, run = service.plan(study_ids, preset, sections, redo)
    if not todo:
        return run
    todo = length_sorted(service, todo)
    connect(ray, config)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.execution_options.preserve_order = True  # length-sorted batches stay sorted
    blocks, actors = blocks_and_actors(len(todo), config)
    dataset = ray.data.from_items([{"study_id": s} for s in todo], override_num_blocks=blocks)
    drafted = dataset.map_batches(
        DraftActor, batch_size=config.batch_size, batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_gpus=config.gpus_per_worker or None, num_cpus=1,
        fn_constructor_kwargs=dict(db_url=service.db.url, data_dir=str(service.settings.data_dir),
                                   runtime=asdict(service.runtime), preset=preset,
                                   sections=list(sections), redo=redo,
                                   key=service.db.configured_key,
                                   busy_timeout_s=service.db.busy_timeout_s))
    done = 0
    if progress:
        progress(0, len(todo))
    for batch in drafted.iter_batches(batch_size=None, batch_format="numpy"):
        run.drafted += int(batch["drafted_sections"].sum())
        run.failed += int(batch["failed_sections"].sum())
        run.skipped += int(batch["skipped"].sum())
        for sid, error in zip(batch["study_id"], batch["error"], strict=True):
            if error:
                section, _, message = str(error).partition(": ")
                run.errors.append((int(sid), section, message))
        done += len(batch["study_id"])
        if progress:
            progress(done, len(todo))
    return run


# -- scoring ---------------------------------------------------------------------------------
def _registry_names(metrics: Iterable[Metric]) -> list[str]:
    """The names the actors build `metrics` from: the registry's (the class's), which differ
    from a metric's own name when the configuration names it, e.g. a BERTScore of another
    model, `bertscore_raw[MODEL]`, is built from `bertscore`; the actor, built with the same
    configuration, gets the same metric under the same name."""
    return list(dict.fromkeys(str(getattr(type(m), "name", m.name)) for m in metrics))


class ScoreActor:
    """The metrics, built once per actor (model-based ones load their model here): per-pair
    payloads for a batch of (metric, hypothesis, reference) rows."""

    def __init__(self, names: Sequence[str], config: dict[str, Any]) -> None:
        from rrg_review.metrics.registry import MetricConfig, build

        self.metrics = {m.name: m for m in build(list(names), MetricConfig(**config))}

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[str]]:
        import json

        names = [str(n) for n in batch["metric"]]
        payloads: list[str] = [""] * len(names)
        for name in dict.fromkeys(names):
            idx = [i for i, n in enumerate(names) if n == name]
            computed = self.metrics[name].compute([str(batch["hyp"][i]) for i in idx],
                                                  [str(batch["ref"][i]) for i in idx])
            for i, payload in zip(idx, computed, strict=True):
                payloads[i] = json.dumps(payload)
        return {"metric": names, "hyp_hash": [str(h) for h in batch["hyp_hash"]],
                "ref_hash": [str(h) for h in batch["ref_hash"]], "payload": payloads}


def _missing_rows(metrics: Sequence[Metric], hyps: Sequence[str], refs: Sequence[str],
                  cache: ScoreCache) -> list[dict[str, Any]]:
    """One row per distinct (metric, pair) the cache lacks, under the key score() reads with
    (the model id plus a hash of the weights' contents)."""
    from rrg_review.metrics.base import text_hash

    rows: list[dict[str, Any]] = []
    for metric in metrics:
        keys = [(text_hash(h), text_hash(r)) for h, r in zip(hyps, refs, strict=True)]
        found = cache.get_many(metric.name, metric.version, metric.cache_id(), keys)
        seen = set(found)
        for (hh, rh), h, r in zip(keys, hyps, refs, strict=True):
            if (hh, rh) not in seen:
                seen.add((hh, rh))
                rows.append({"metric": metric.name, "hyp": h, "ref": r,
                             "hyp_hash": hh, "ref_hash": rh})
    return rows


def fill_score_cache_on_ray(metrics: Sequence[Metric], config: MetricConfig,
                            hyps: Sequence[str], refs: Sequence[str], cache: ScoreCache,
                            ray_config: RayConfig,
                            progress: Progress | None = None) -> int:
    """Compute on Ray every (metric, pair) the cache lacks and store it in the cache as each
    batch returns, so `metrics.scoring.score` then only aggregates (same values as a local run,
    which computes the same per-pair payloads), and a killed run resumes from the cache.
    Returns the number of payloads computed.

    Args:
        metrics: the metrics; unavailable ones are skipped (`score` reports them).
        config: the metric settings each Ray actor builds its metrics from.
        hyps: generated reports, one per pair.
        refs: reference reports, in the same order.
        cache: the score cache to fill.
        ray_config: the Ray cluster address, batch size, actors and GPUs per actor.
        progress: called with (payloads done, payloads to do) after each batch.

    Returns:
        How many distinct (metric, pair) payloads were computed; 0, without starting Ray,
        when the cache had them all.
    """
    import json

    ray = _ray()
    by_name = {m.name: m for m in metrics if m.available()[0]}  # score() reports the others
    rows = _missing_rows(list(by_name.values()), hyps, refs, cache)
    if not rows:
        return 0
    rows.sort(key=lambda row: (row["metric"], len(row["hyp"]) + len(row["ref"])))
    connect(ray, ray_config)
    ray.data.DataContext.get_current().enable_progress_bars = False
    blocks, actors = blocks_and_actors(len(rows), ray_config)
    scored = ray.data.from_items(rows, override_num_blocks=blocks).map_batches(
        ScoreActor, batch_size=ray_config.batch_size, batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_gpus=ray_config.gpus_per_worker or None, num_cpus=1,
        fn_constructor_kwargs=dict(names=_registry_names(by_name.values()),
                                   config=asdict(config)))
    done = 0
    for batch in scored.iter_batches(batch_size=None, batch_format="numpy"):
        fresh: dict[str, dict[Key, Payload]] = {}
        for name, hh, rh, payload in zip(batch["metric"], batch["hyp_hash"], batch["ref_hash"],
                                         batch["payload"], strict=True):
            fresh.setdefault(str(name), {})[(str(hh), str(rh))] = json.loads(str(payload))
        for name, items in fresh.items():
            metric = by_name[name]
            cache.put_many(metric.name, metric.version, metric.cache_id(), items)
        done += len(batch["metric"])
        if progress:
            progress(done, len(rows))
    return done
