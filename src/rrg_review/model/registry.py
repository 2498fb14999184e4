"""Drafting backends by name, like the other plug-in registries (core/registry.py): each
backend module has a `from_options(preset, options)` that builds its drafter, imported only when
a preset of that backend is loaded (torch and transformers stay out of `import model`)."""

from __future__ import annotations

from rrg_review.core.registry import LazyRegistry
from rrg_review.model.base import Drafter
from rrg_review.model.options import DrafterOptions
from rrg_review.model.presets import Preset

BACKENDS = LazyRegistry("backend", {
    "retrieval": "rrg_review.model.backends.retrieval:from_options",
    "openai": "rrg_review.model.backends.openai_server:from_options",
    "vision-encoder-decoder": "rrg_review.model.backends.encoder_decoder:from_options",
    "chat": "rrg_review.model.backends.chat:from_options",
    "worker": "rrg_review.model.backends.worker_client:from_options",
})


def load_drafter(preset: Preset, options: DrafterOptions | None = None) -> Drafter:
    """The drafter a preset names, built by its backend.

    Args:
        preset: the preset (its `backend` picks the builder).
        options: device, dtype, batch size, downloads, worker interpreter, candidates.

    Returns:
        The drafter (an in-process model is loaded on first use).

    Raises:
        ValueError: an unknown backend (naming the known ones), or a backend refusing its
            options (retrieval without candidates).
    """
    try:
        build = BACKENDS.load(preset.backend)
    except ValueError as exc:
        raise ValueError(f"preset {preset.name}: {exc}") from None
    drafter: Drafter = build(preset, options or DrafterOptions())
    return drafter


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
