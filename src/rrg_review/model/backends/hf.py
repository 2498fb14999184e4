"""What the in-process Hugging Face backends share: loading once, error isolation, timing."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rrg_review.model.base import run_adaptive
from rrg_review.model.device import Placement
from rrg_review.model.inputs import DraftResult, Provenance, StudyInput
from rrg_review.model.presets import Preset

if TYPE_CHECKING:
    from transformers import GenerationMixin, TextIteratorStreamer

log = logging.getLogger(__name__)


class InProcessDrafter:
    """What the in-process Hugging Face backends hold: preset, placement, batch ceiling, and a
    lock around loading (the pre-drafting thread and the UI share one drafter)."""

    streams = True

    def __init__(self, preset: Preset, placement: Placement, batch_size: int | None = None,
                 download: bool = True) -> None:
        self.preset = preset.name
        self._preset = preset
        self.placement = placement
        self.batch_size = default_batch_size(placement, batch_size)
        self.download = download
        self._lock = threading.Lock()


def default_batch_size(placement: Placement, configured: int | None) -> int:
    if configured:
        return configured
    return 8 if placement.device.startswith("cuda") else 2


def isolate_errors(
    studies: Sequence[StudyInput],
    run: Callable[[Sequence[StudyInput]], list[str]],
    batch_size: int,
) -> tuple[list[str | None], list[str | None], float]:
    """Texts (or errors) for all studies; a failing batch is retried one study at a time so one
    bad study costs only its own draft. Returns (texts, errors, seconds per study)."""
    start = time.perf_counter()
    texts: list[str | None] = [None] * len(studies)
    errors: list[str | None] = [None] * len(studies)
    try:
        drafted = run_adaptive(studies, run, batch_size)
        texts = list(drafted)
    except Exception:
        log.info("a batch of %d failed; drafting one study at a time", len(studies),
                 exc_info=True)
        for i, study in enumerate(studies):
            try:
                texts[i] = run([study])[0]
            except Exception as exc:  # recorded with the draft; the others go on
                log.warning("drafting study %s failed", study.study_id, exc_info=True)
                errors[i] = f"{type(exc).__name__}: {exc}"
    seconds = (time.perf_counter() - start) / max(1, len(studies))
    return texts, errors, seconds


def results_for(section: str, studies: Sequence[StudyInput], texts: Sequence[str | None],
                errors: Sequence[str | None],
                provenance: Provenance) -> list[DraftResult]:
    out = []
    for study, text, error in zip(studies, texts, errors, strict=True):
        out.append(DraftResult(study.study_id, section, None if error else (text or "").strip(),
                               provenance, error))
    return out


def stream_generate(model: GenerationMixin, streamer: TextIteratorStreamer,
                    kwargs: dict[str, Any]) -> Iterator[str]:
    """Run generate in a thread and yield the accumulated text as tokens arrive."""
    import torch

    errors: list[BaseException] = []

    def work() -> None:
        try:
            with torch.inference_mode():
                model.generate(**kwargs)
        except BaseException as exc:  # surfaced in the consumer below
            errors.append(exc)
            streamer.end()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    text = ""
    for piece in streamer:
        text += piece
        yield text.strip()
    thread.join()
    if errors:
        raise errors[0]


def free_accelerator() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
