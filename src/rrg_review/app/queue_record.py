"""Gradio's record of the events its queue ran, kept to the recent ones and never summarised.

Gradio 6.17's queue notes every event it runs (`Queue.event_analytics`: function, status,
times; for its monitoring dashboard) and keeps each note forever; after every event it also
rebuilt a pandas summary of all of them (`compute_analytics_summary`, every
`GRADIO_ANALYTICS_CACHE_FREQUENCY` events, 1 by default). The workstation serves no monitoring
dashboard, and a reading room's or a team's server runs for days: the record grew by an entry
per event (the autosave tick alone sends one every 4 s per open tab) and the summary cost 6-9 ms
of the server's CPU per event, more as the record grew (8,000 events: 9 ms). Upstream bounded
the record after the Gradio this project pins (gradio-app/gradio#13154, #13756).

`bound_queue_record(blocks)` keeps the last `KEEP` notes and turns the summary off.
"""

from __future__ import annotations

import logging
import sys
from collections import OrderedDict
from typing import Any

log = logging.getLogger(__name__)

KEEP = 1000  # events; more than any one tab has in progress or waiting


class RecentEvents(OrderedDict[str, dict[str, Any]]):
    """The notes of the last `keep` events. A note already dropped reads as an empty one
    (Gradio updates an event's note when the event ends; a note dropped meanwhile must not
    fail the event)."""

    def __init__(self, keep: int = KEEP) -> None:
        super().__init__()
        self.keep = keep

    def __setitem__(self, key: str, value: dict[str, Any]) -> None:
        super().__setitem__(key, value)
        while len(self) > self.keep:
            self.popitem(last=False)

    def __missing__(self, key: str) -> dict[str, Any]:
        return {}


def bound_queue_record(blocks: Any) -> bool:
    """Keep `blocks`' queue record to the recent events and never summarise it; False (and a
    log line) when this Gradio's queue has no such record."""
    queue: Any = getattr(blocks, "_queue", None)
    record = getattr(queue, "event_analytics", None)
    if not isinstance(record, dict) or not hasattr(queue, "ANAYLTICS_CACHE_FREQUENCY"):
        log.info("Gradio's queue keeps no event record here: nothing to bound")
        return False
    if not isinstance(record, RecentEvents):
        recent = RecentEvents()
        for key, note in list(record.items())[-KEEP:]:
            recent[key] = note
        queue.event_analytics = recent
    # the summary is rebuilt once the record has grown by this many events since the last
    # time: with the record bounded below it, never
    queue.ANAYLTICS_CACHE_FREQUENCY = sys.maxsize
    return True
