"""Fair service: one reader (or one tab) flooding events cannot starve the other readers.

Gradio's queue is first come, first served per event function, one at a time by default: a
client sending events faster than they run (the issue measured ~840 a minute) grew the queue
to 777 waiting events, and another reader's Next waited 57.7 s behind them. Here, per signed-in
request (server.py's `RequestCheck`):

- Limits: a tab may have `tab_limit` queued or running events, a reader `reader_limit` over
  all their tabs, and `inflight_limit` other requests in progress (unqueued events run in the
  request itself); beyond that the request gets 429 with a "slow down" sentence, which Gradio's
  page shows as an error notice (never a silent stall).
- Rate: while another reader is active (a request in the last few seconds), a reader may
  start `join_burst` queued events at once and then `join_rate` a second (a token bucket):
  the order below cannot stop a flood from keeping an event lane busy, so another reader's
  event would still wait a whole running event each time (bench/fairness.py: Next p95 4.1x
  without the rate, 1.2x with it). A reader alone is never held to it, but spends from it.
- Order: after each join, every lane of Gradio's queue is put in fair order: a reader's k-th
  waiting event (counting their running ones) goes after every other reader's events of lower
  rank, so another reader's first event waits at most for the events already running.

Gradio's queue internals (`_queue.event_queue_per_concurrency_id`, `active_jobs`, each
event's `username` and `session_hash`) are read with `getattr`: on a Gradio without them the
limits and the order are skipped, and the queue is Gradio's own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

SLOW_DOWN = ("Slow down: this {what} has {n} requests waiting. Wait for them to finish, "
             "then try again.")
SLOW_DOWN_RATE = ("Slow down: more than {rate:g} requests a second from this reader. Wait a "
                  "moment, then try again.")


@dataclass(frozen=True)
class FairLimits:
    tab_limit: int = 12  # queued + running events of one browser tab
    reader_limit: int = 24  # ... of one reader, over all their tabs
    inflight_limit: int = 12  # a reader's other requests in progress at once
    # queued events a reader may start: `join_burst` at once, then `join_rate` a second. A
    # reader flipping studies as fast as keys repeat made ~7 a second for 2-3 s (15 Alt+N in
    # 1.5 s: 17 joins); a flood kept the Next lane busy, so another reader's Next waited a
    # whole event (2.1x its p95) however fair the order; at 5 a second still 1.7-2.3x.
    # Only while another reader is active (a request within `others_within` seconds): a
    # reader alone may use the whole server.
    # (A page's navigation is two joins: the step and its metrics. `others_within` must stay
    # above the page's autosave tick, deps.AUTOSAVE_S, which every open tab sends: a reader
    # with a page open counts as active; tests/test_fair_rate.py checks it.)
    join_rate: float = 3.0
    join_burst: float = 40.0
    others_within: float = 6.0


def _key(event: Any) -> str:
    return str(getattr(event, "username", None) or getattr(event, "session_hash", ""))


class FairQueue:
    """The limits and the fair order over one Gradio app's queue (see the module)."""

    def __init__(self, blocks: Any, limits: FairLimits = FairLimits(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.blocks, self.limits, self._clock = blocks, limits, clock
        self._inflight: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._warned: dict[str, float] = {}
        self._tokens: dict[str, tuple[float, float]] = {}  # reader: (tokens, at)
        self._seen: dict[str, float] = {}  # reader: their last request (monotonic)

    def _lanes(self) -> list[Any]:
        queue = getattr(self.blocks, "_queue", None)
        lanes = getattr(queue, "event_queue_per_concurrency_id", None)
        return list(lanes.values()) if isinstance(lanes, dict) else []

    def _running(self) -> Iterator[Any]:
        queue = getattr(self.blocks, "_queue", None)
        for job in list(getattr(queue, "active_jobs", None) or []):
            yield from job or []

    def join_refusal(self, user: str, session_hashes: set[str]) -> str | None:
        """The "slow down" sentence when a new event of `user` from these tabs would go over
        a limit, else None."""
        tab = reader = 0
        waiting = (e for lane in self._lanes() for e in list(getattr(lane, "queue", [])))
        for event in [*waiting, *self._running()]:
            if getattr(event, "username", None) == user:
                reader += 1
                tab += getattr(event, "session_hash", None) in session_hashes
        if tab >= self.limits.tab_limit:
            return self._refused(user, "tab", tab)
        if reader >= self.limits.reader_limit:
            return self._refused(user, "reader", reader)
        return self._take_token(user)

    def _take_token(self, user: str) -> str | None:
        """Spend one of `user`'s join tokens (a token bucket), or the "slow down" sentence
        when none is left. On the event loop, like the other join checks."""
        with self._lock:
            now, limits = self._clock(), self.limits
            tokens, at = self._tokens.get(user, (limits.join_burst, now))
            tokens = min(limits.join_burst, tokens + (now - at) * limits.join_rate)
            if not self._others_active(user, now):
                # alone: never refused, but the tokens are spent all the same, so a reader
                # who flooded alone has none left the moment another reader arrives
                self._tokens[user] = (max(0.0, tokens - 1), now)
                return None
            if tokens >= 1:
                self._tokens[user] = (tokens - 1, now)
                return None
            self._tokens[user] = (tokens, now)
        return self._refused(user, "reader", 0, rate=True)

    def out_of_tokens(self, user: str) -> str | None:
        """The rate's "slow down" sentence when `user` has no join token left while another
        reader is active, without spending one (nothing else is looked at: no queue walk, no
        body, no database); else None, and the full check follows. A flood's joins are mostly
        refused here (server.py's early refusal), so a refused join costs the server next to
        nothing."""
        with self._lock:
            now, limits = self._clock(), self.limits
            tokens, at = self._tokens.get(user, (limits.join_burst, now))
            tokens = min(limits.join_burst, tokens + (now - at) * limits.join_rate)
            if tokens >= 1 or not self._others_active(user, now):
                return None
        return self._refused(user, "reader", 0, rate=True)

    def _others_active(self, user: str, now: float) -> bool:
        """Note `user`'s request; whether another reader made one within `others_within`
        (under `_lock`)."""
        self._seen[user] = now
        recent = now - self.limits.others_within
        if len(self._seen) > 256:  # readers gone for a while are forgotten
            for gone in [u for u, t in self._seen.items() if t < recent]:
                del self._seen[gone]
        return any(t >= recent for u, t in self._seen.items() if u != user)

    def _refused(self, user: str, what: str, n: int, rate: bool = False) -> str:
        now = self._clock()
        if now - self._warned.get(user, -60.0) >= 60:  # once a minute per reader, not per hit
            self._warned[user] = now
            if rate:
                log.warning("%s starts events faster than %g a second: refused with 'slow "
                            "down'", user, self.limits.join_rate)
            else:
                log.warning("%s sends events faster than they run (%d of this %s waiting): "
                            "refused with 'slow down'", user, n, what)
        return (SLOW_DOWN_RATE.format(rate=self.limits.join_rate) if rate
                else SLOW_DOWN.format(what=what, n=n))

    def reorder(self) -> None:
        """Put every lane of the queue in fair order (stable: a reader's own events keep
        their order). Synchronous, on the event loop: Gradio takes events off the queue on
        the same loop, so it never sees a half-sorted lane."""
        running = Counter(_key(e) for e in self._running())
        for lane in self._lanes():
            waiting = getattr(lane, "queue", None)
            if not isinstance(waiting, list) or len(waiting) < 2:
                continue
            seen = Counter(running)
            ranks = []
            for event in waiting:
                key = _key(event)
                ranks.append(seen[key])
                seen[key] += 1
            order = sorted(range(len(waiting)), key=ranks.__getitem__)
            waiting[:] = [waiting[i] for i in order]

    def enter(self, user: str) -> str | None:
        """Count one more request of `user` in progress, or the "slow down" sentence (and
        nothing counted) when they have `inflight_limit` already; `leave` after a None."""
        with self._lock:
            self._seen[user] = self._clock()
            if self._inflight[user] >= self.limits.inflight_limit:
                n = self._inflight[user]
            else:
                self._inflight[user] += 1
                return None
        return self._refused(user, "reader", n)

    def leave(self, user: str) -> None:
        with self._lock:
            self._inflight[user] -= 1
            if self._inflight[user] <= 0:
                del self._inflight[user]
