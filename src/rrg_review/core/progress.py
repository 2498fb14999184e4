"""The progress callback every long operation takes (import, drafting, scoring)."""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[int, int | None], None]  # (done so far, total if known)
