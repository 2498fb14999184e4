"""Build the drafter a preset names (the backend module is imported only then)."""

from __future__ import annotations

from rrg_review.model.base import Drafter
from rrg_review.model.device import select
from rrg_review.model.options import DrafterOptions
from rrg_review.model.presets import Preset


def load_drafter(preset: Preset, options: DrafterOptions | None = None) -> Drafter:
    options = options or DrafterOptions()
    if preset.backend == "retrieval":
        from rrg_review.model.backends.retrieval import (
            EncoderFeatures,
            RetrievalDrafter,
            ThumbnailFeatures,
        )

        if options.candidates is None:
            raise ValueError("the retrieval preset needs a database of studies to retrieve from")
        encoder = preset.options.get("encoder")
        features = (EncoderFeatures(encoder, select(options.device, options.dtype),
                                    options.download) if encoder else ThumbnailFeatures())
        return RetrievalDrafter(preset, options.candidates, features, options.feature_dir)
    if preset.backend == "openai":  # the model runs on a server: no local device
        from rrg_review.model.backends.openai_server import OpenAIServerDrafter

        return OpenAIServerDrafter(preset)
    placement = select(options.device, options.dtype)
    if preset.backend == "vision-encoder-decoder":
        from rrg_review.model.backends.encoder_decoder import EncoderDecoderDrafter

        return EncoderDecoderDrafter(preset, placement, options.batch_size, options.download)
    if preset.backend == "chat":
        from rrg_review.model.backends.chat import ChatDrafter

        return ChatDrafter(preset, placement, options.batch_size, options.download)
    if preset.backend == "worker":
        from rrg_review.model.backends.worker_client import WorkerDrafter

        return WorkerDrafter(preset, placement, options.worker_python, options.download)
    raise ValueError(f"preset {preset.name}: unknown backend {preset.backend!r}")


def availability(preset: Preset) -> tuple[bool, str]:
    """Whether every model of a preset is on this machine (never downloads)."""
    from rrg_review.model.hub import cached

    if preset.backend == "retrieval":
        encoder = preset.options.get("encoder")
        if encoder and cached(encoder) is None:
            return False, f"encoder {encoder} not in the local cache"
        return True, "needs no download" if not encoder else f"encoder {encoder} cached"
    if preset.backend == "openai":
        return True, f"served by {preset.options.get('base_url')}"
    missing = [m for m in preset.model_ids if cached(m) is None]
    if missing:
        return False, "not cached: " + ", ".join(missing)
    return True, "cached"
