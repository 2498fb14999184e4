"""The SQLite writers' queue of one process: turns are handed over in arrival order, a wait
past its timeout gives up cleanly."""

from __future__ import annotations

import threading
import time

from rrg_review.db.writer_queue import WriterQueue


def _queued(q: WriterQueue, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(q._waiting) < n:
        assert time.monotonic() < deadline, "a writer never queued"
        time.sleep(0.001)


def test_turns_go_in_arrival_order():
    q = WriterQueue()
    assert q.acquire(1)
    order: list[int] = []

    def writer(i: int) -> None:
        assert q.acquire(30)
        order.append(i)
        q.release()

    threads = []
    for i in range(8):
        t = threading.Thread(target=writer, args=(i,))
        t.start()
        _queued(q, i + 1)  # each one waits before the next arrives
        threads.append(t)
    q.release()
    for t in threads:
        t.join(30)
    assert order == list(range(8))
    assert q.acquire(0)  # free again
    q.release()


def test_a_wait_past_its_timeout_gives_up_and_leaves_no_trace():
    q = WriterQueue()
    assert q.acquire(1)
    assert q.acquire(0.05) is False
    assert len(q._waiting) == 0
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(q.acquire(30)))
    t.start()
    _queued(q, 1)
    q.release()  # handed to the waiter, not freed
    t.join(30)
    assert got == [True] and q.acquire(0) is False
    q.release()
    assert q.acquire(0)
