"""Runtime options for building a drafter, gathered in one place and passed down."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rrg_review.model.inputs import Candidate


@dataclass(frozen=True)
class DrafterOptions:
    device: str | None = None  # auto: CUDA > MPS > CPU
    dtype: str | None = None  # auto: bf16/fp16 on GPU, fp32 on CPU
    batch_size: int | None = None  # ceiling; halved on out-of-memory. None: 8 on GPU, 2 on CPU
    download: bool = True  # fetch missing weights unless HF_HUB_OFFLINE
    worker_python: str | None = None  # interpreter for worker presets (else the preset's env var)
    feature_dir: Path | None = None  # where retrieval caches image features
    # the studies retrieval may copy from (the service reads them from the DB)
    # (called with the last study id seen: only newer ones are returned)
    candidates: Callable[[int], Iterable[Candidate]] | None = None
