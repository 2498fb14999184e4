"""`rrg-review models --fetch-metrics`: put every metric model where the metrics look for it."""

from __future__ import annotations

from collections.abc import Iterator


def fetch_metric_models() -> Iterator[str]:
    from metrics.bertscore import OFFICIAL_MODEL
    from metrics.chexbert import BACKBONE, REPO, WEIGHTS
    from metrics.radgraph import RadGraphF1
    from model.hub import ModelUnavailable, fetch

    for model_id in (OFFICIAL_MODEL, BACKBONE):
        found = fetch(model_id)
        yield f"{model_id}: {found.path}"
    from huggingface_hub import hf_hub_download

    try:
        yield f"{REPO}/{WEIGHTS}: {hf_hub_download(REPO, WEIGHTS)}"
    except Exception as exc:
        raise ModelUnavailable(f"{REPO}/{WEIGHTS}", f"download failed ({exc})") from exc
    metric = RadGraphF1()
    try:
        metric._load()  # the radgraph package downloads and unpacks its own archive
    except Exception as exc:
        raise ModelUnavailable("radgraph-xl", f"download failed ({exc})") from exc
    yield f"radgraph-xl: {metric.model_dir}"
