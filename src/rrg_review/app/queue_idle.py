"""Gradio's queue, idle without spinning.

Gradio 6.17's queue looks for work in a loop that sleeps `Queue.sleep_when_free` between looks
when nothing is waiting: 1 ms off Windows (50 ms on it), and its progress loop looks every
10 ms (`progress_update_sleep_when_free`). An idle workstation server, no page open, spent 6 %
of a core on those wake-ups (2-core test machine; py-spy: the event loop's timers under
`Queue.start_processing`), all day in a reading room, and in each of the test suite's ~70 apps.

`calm_queue(blocks)` makes the looks 10 ms and 50 ms apart: a queued event waits at most 10 ms
more before it starts, far under what a reader can see next to the event's own round trip, and
progress messages come at most 20 times a second.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

LOOK_FOR_WORK_S = 0.01  # Gradio: 0.001 (0.05 on Windows)
LOOK_FOR_PROGRESS_S = 0.05  # Gradio: 0.01 (0.1 on Windows)


def calm_queue(blocks: Any) -> bool:
    """Space out `blocks`' queue's idle looks for work and progress (never closer than
    Gradio's own); False (and a log line) when this Gradio's queue has no such settings."""
    queue: Any = getattr(blocks, "_queue", None)
    settings = ("sleep_when_free", "progress_update_sleep_when_free")
    if queue is None or not all(isinstance(getattr(queue, s, None), float) for s in settings):
        log.info("Gradio's queue has no idle-poll settings here: left as it is")
        return False
    queue.sleep_when_free = max(queue.sleep_when_free, LOOK_FOR_WORK_S)
    queue.progress_update_sleep_when_free = max(queue.progress_update_sleep_when_free,
                                                LOOK_FOR_PROGRESS_S)
    return True
