"""`rrg-review models --fetch-metrics`: put every metric model where the metrics look for it, and
list each file with its size and sha256 (the same content hashes the score cache keys on)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # hashing imports stay inside the download command
    from rrg_review.metrics.fingerprint import FileHasher

log = logging.getLogger(__name__)


def _describe(label: str, files: list[Path], hasher: FileHasher) -> Iterator[str]:
    yield f"{label}:"
    for path in files:
        yield f"  {path}  {path.stat().st_size:,} bytes  sha256 {hasher.file(path)}"


RATESCORE_MODELS = ("Angelakeke/RaTE-NER-Deberta", "FremyCompany/BioLORD-2023-C")
GREEN_MODEL = "StanfordAIMI/GREEN-RadLlama2-7b"


def fetch_metric_models() -> Iterator[str]:
    """Download every model the in-process metrics (and RaTEScore's worker) need, so later
    runs work offline, and say what was fetched.

    Returns:
        Lines to print as they come: each model, then each of its files with size and
        sha256; the last line says how the worker metrics get theirs.

    Raises:
        ModelUnavailable: a model could not be downloaded or unpacked; says which.
    """
    from rrg_review.metrics.bertscore import OFFICIAL_MODEL, REXRANK_MODEL, shipped_baseline
    from rrg_review.metrics.chexbert import BACKBONE, REPO, WEIGHTS
    from rrg_review.metrics.fingerprint import FileHasher, all_files, model_folder_files
    from rrg_review.metrics.radgraph import RadGraphF1
    from rrg_review.model.hub import ModelUnavailable, fetch

    hasher = FileHasher()
    for model_id in (OFFICIAL_MODEL, REXRANK_MODEL):
        found = fetch(model_id)
        files = [*model_folder_files(found.path), shipped_baseline(model_id)]
        yield from _describe(f"{model_id} (revision {found.revision})", files, hasher)
    backbone = fetch(BACKBONE)
    yield from _describe(f"{BACKBONE} (revision {backbone.revision}; config and vocabulary: "
                         "CheXbert replaces its weights)",
                         model_folder_files(backbone.path, weights=False), hasher)
    from huggingface_hub import hf_hub_download

    try:
        weights = Path(hf_hub_download(REPO, WEIGHTS))
    except Exception as exc:
        log.debug("downloading %s/%s failed", REPO, WEIGHTS, exc_info=True)
        raise ModelUnavailable(f"{REPO}/{WEIGHTS}", f"download failed ({exc})") from exc
    yield from _describe(f"{REPO}/{WEIGHTS} (CheXbert F1 and SembScore)", [weights], hasher)
    for model_type in ("radgraph-xl", "radgraph"):
        metric = RadGraphF1(model_type)
        try:
            metric._load()  # the radgraph package downloads and unpacks its own archive
        except Exception as exc:
            log.debug("loading %s failed", model_type, exc_info=True)
            raise ModelUnavailable(model_type, f"download failed ({exc})") from exc
        yield from _describe(f"{model_type} ({metric.model_dir})", all_files(metric.model_dir),
                             hasher)
    # RaTEScore's models load by hub id inside its worker, from the same Hugging Face cache
    for model_id in RATESCORE_MODELS:
        found = fetch(model_id)
        yield from _describe(f"{model_id} (RaTEScore, revision {found.revision})",
                             model_folder_files(found.path), hasher)
    yield (f"green: {GREEN_MODEL} (about 14 GB) is fetched by its worker on a GPU machine; "
           "ratescore and green run in their own environments (`rrg-review metrics "
           "setup-worker ratescore`)")
