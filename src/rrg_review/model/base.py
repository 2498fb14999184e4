"""The one Drafter interface every backend implements, and the batching helpers they share."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from rrg_review.core.vocabulary import SECTIONS
from rrg_review.model.inputs import DraftResult, Provenance, StudyInput

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Drafter(Protocol):
    """Study inputs in, one DraftResult per (study, section) out, in input order.

    A failure on one study is returned as a DraftResult with `error` set; it does not raise.
    """

    preset: str
    streams: bool  # True when stream() yields tokens as they come (else the text arrives whole)

    def draft(self, batch: Sequence[StudyInput],
              sections: Sequence[str] = SECTIONS) -> list[DraftResult]: ...

    def stream(self, study: StudyInput, section: str) -> Iterator[str]:
        """The growing text of one section, for showing tokens as they come."""
        ...

    def provenance(self, section: str) -> Provenance:
        """Which model (and settings) drafts this section."""
        ...

    def close(self) -> None:
        """Free the model (GPU memory, worker process)."""
        ...


def stream_whole(drafter: Drafter, study: StudyInput, section: str,
                 error: type[Exception] = RuntimeError) -> Iterator[str]:
    """`stream()` of a drafter that cannot stream (`streams = False`): the whole text at once,
    or its error raised as `error`, so callers treat every drafter the same way."""
    result = drafter.draft([study], [section])[0]
    if result.error:
        raise error(result.error)
    yield result.text or ""


def check_sections(sections: Sequence[str]) -> tuple[str, ...]:
    bad = [s for s in sections if s not in SECTIONS]
    if bad:
        raise ValueError(f"unknown section(s) {', '.join(bad)}; use findings and/or impression")
    return tuple(sections)


def length_buckets(items: Sequence[T], size: int,
                   length: Callable[[T], int]) -> Iterator[list[int]]:
    """Indices of `items` in batches of at most `size`, sorted by length so padding stays small."""
    if size < 1:
        raise ValueError("batch size must be at least 1")
    order = sorted(range(len(items)), key=lambda i: length(items[i]))
    for start in range(0, len(order), size):
        yield order[start:start + size]


def is_out_of_memory(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def run_adaptive(batch: Sequence[T], run: Callable[[Sequence[T]], list[R]],
                 max_size: int) -> list[R]:
    """Run `run` on chunks of at most `max_size`, halving the chunk on out-of-memory errors.

    Batches are sized to memory: the configured size is a ceiling, not a promise.
    """
    results: list[R] = []
    size = max(1, max_size)
    start = 0
    while start < len(batch):
        chunk = batch[start:start + size]
        try:
            results.extend(run(chunk))
        except Exception as exc:
            if not is_out_of_memory(exc) or size == 1:
                raise
            log.warning("out of memory with a batch of %d; retrying with %d", size,
                        max(1, size // 2))
            _empty_cache()
            size = max(1, size // 2)
            continue
        start += len(chunk)
    return results


def _empty_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
