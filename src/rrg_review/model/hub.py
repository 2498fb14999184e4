"""Finding model weights the way users' machines do: a local folder, or the Hugging Face cache,
downloading only when allowed (HF_HUB_OFFLINE respected)."""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)


class ModelUnavailable(RuntimeError):
    """A model's weights are neither local nor downloadable; the message says how to get them."""

    def __init__(self, model_id: str, reason: str, preset: str | None = None) -> None:
        how = (f"run `rrg-review models --fetch {preset}` on a machine with network access"
               if preset else f"download {model_id} into the Hugging Face cache")
        super().__init__(f"model {model_id} is not available: {reason}. To get it, {how}, "
                         "or point the preset at a local folder holding the model.")
        self.model_id = model_id
        self.reason = reason


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model's files are and which exact version they are."""

    model_id: str
    path: Path
    revision: str  # hub commit hash, or "local-<hash of config>" for a plain folder


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _local_revision(path: Path) -> str:
    digest = hashlib.sha256()
    for name in ("config.json", "generation_config.json", "preprocessor_config.json"):
        if (path / name).is_file():
            digest.update((path / name).read_bytes())
    return "local-" + digest.hexdigest()[:12]


def cached(model_id: str, revision: str | None = None) -> ResolvedModel | None:
    """The model if it is a local folder or complete in the HF cache; never downloads."""
    folder = Path(model_id).expanduser()
    if folder.is_dir():
        return ResolvedModel(model_id, folder.resolve(), _local_revision(folder))
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        path = Path(snapshot_download(model_id, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError) as exc:  # not (completely) here
        log.debug("%s is not in the Hugging Face cache: %s: %s", model_id, type(exc).__name__,
                  exc)
        return None
    if not (path / "config.json").is_file():
        return None
    return ResolvedModel(model_id, path, path.name)


def resolve(model_id: str, revision: str | None = None, preset: str | None = None,
            download: bool = True) -> ResolvedModel:
    """Local or cached files, else a download (unless offline), else ModelUnavailable."""
    found = cached(model_id, revision)
    if found is not None:
        return found
    if not download or offline():
        raise ModelUnavailable(model_id, "it is not in the local Hugging Face cache and "
                               "downloads are off (HF_HUB_OFFLINE)" if offline() else
                               "it is not in the local Hugging Face cache", preset)
    return fetch(model_id, revision, preset)


def fetch(model_id: str, revision: str | None = None, preset: str | None = None) -> ResolvedModel:
    """Download a model snapshot into the HF cache."""
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(model_id, revision=revision))
    except Exception as exc:  # network, auth (gated models), unknown repo: all mean "not here"
        log.warning("downloading %s failed", model_id, exc_info=True)
        raise ModelUnavailable(model_id, f"the download failed ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})",
                               preset) from exc
    return ResolvedModel(model_id, path, path.name)
