"""Finding model weights the way users' machines do: a local folder, or the Hugging Face cache,
downloading only when allowed (HF_HUB_OFFLINE respected).

Whether the hub can be reached at all is asked once per process (`hub_unreachable`: one short
HTTP request with a hard deadline), so a machine without network, a hospital reading room,
never waits on the hub's own retries: `go_offline` then tells the libraries (huggingface_hub,
transformers) through their own switch, HF_HUB_OFFLINE.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Mapping
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


DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_SECONDS = 1.5  # one attempt: a reachable hub answers a HEAD well within this
FETCH_METRICS = "rrg-review models --fetch-metrics"  # the command that downloads metric weights


def offline(environ: Mapping[str, str] | None = None) -> bool:
    """Whether HF_HUB_OFFLINE asks for no network (huggingface_hub's own switch)."""
    value = (os.environ if environ is None else environ).get("HF_HUB_OFFLINE", "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def hub_endpoint(environ: Mapping[str, str] | None = None) -> str:
    """The hub the libraries would download from: $HF_ENDPOINT, else huggingface.co."""
    value = (os.environ if environ is None else environ).get("HF_ENDPOINT", "").strip()
    return (value or DEFAULT_ENDPOINT).rstrip("/")


def hub_unreachable(environ: Mapping[str, str] | None = None,
                    seconds: float = PROBE_SECONDS) -> str | None:
    """Why weights cannot be downloaded now, or None when the hub answers.

    HF_HUB_OFFLINE is taken at its word; otherwise one HEAD request to the hub must get any
    HTTP answer within `seconds`, a deadline that also covers name resolution (the request runs
    in a daemon thread; a resolver that hangs is left behind, never waited on).

    Args:
        environ: the environment to read (default: this process's).
        seconds: the deadline of the one attempt.

    Returns:
        None (downloads may go ahead), or a reason such as "no network: the Hugging Face hub
        (https://huggingface.co) did not answer within 1.5 s".
    """
    if offline(environ):
        return "downloads are off (HF_HUB_OFFLINE is set)"
    endpoint = hub_endpoint(environ)
    outcome: list[str | None] = []

    def attempt() -> None:
        request = urllib.request.Request(  # noqa: S310 - the configured http(s) hub endpoint
            endpoint + "/api/models?limit=1", method="HEAD")
        try:
            with urllib.request.urlopen(request, timeout=seconds):  # noqa: S310 - as above
                outcome.append(None)
        except urllib.error.HTTPError:  # the hub answered (even a refusal is an answer)
            outcome.append(None)
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            outcome.append(str(getattr(reason, "strerror", None) or reason
                               or type(reason).__name__))

    thread = threading.Thread(target=attempt, name="hub-probe", daemon=True)
    thread.start()
    thread.join(seconds + 0.25)
    if outcome and outcome[0] is None:
        return None
    detail = outcome[0] if outcome else f"no answer within {seconds:g} s"
    return f"no network: the Hugging Face hub ({endpoint}) cannot be reached ({detail})"


def go_offline() -> None:
    """Tell huggingface_hub and transformers, through HF_HUB_OFFLINE, never to reach the
    network in this process (they read it when imported; modules already imported are told
    too), so a cached model loads at once instead of after the hub's retries."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True  # type: ignore[attr-defined]
    hub_utils = sys.modules.get("transformers.utils.hub")
    if hub_utils is not None and hasattr(hub_utils, "_is_offline_mode"):
        hub_utils._is_offline_mode = True  # type: ignore[attr-defined]


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
