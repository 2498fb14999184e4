"""What the in-process Hugging Face backends share: loading once, error isolation, timing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from model.base import run_adaptive
from model.device import Placement
from model.inputs import DraftResult, Provenance, StudyInput


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
        texts = list(run_adaptive(studies, run, batch_size))
    except Exception:
        for i, study in enumerate(studies):
            try:
                texts[i] = run([study])[0]
            except Exception as exc:  # recorded with the draft; the others go on
                errors[i] = f"{type(exc).__name__}: {exc}"
    seconds = (time.perf_counter() - start) / max(1, len(studies))
    return texts, errors, seconds


def results_for(section: str, studies: Sequence[StudyInput], texts, errors,
                provenance: Provenance) -> list[DraftResult]:
    out = []
    for study, text, error in zip(studies, texts, errors, strict=True):
        out.append(DraftResult(study.study_id, section, None if error else (text or "").strip(),
                               provenance, error))
    return out
