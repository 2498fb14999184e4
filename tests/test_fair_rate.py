"""The per-reader rate of queued events (app/fair.py's token bucket), on a clock the test
moves: a reader alone is never held to it; while another reader is active, a flood gets its
burst and then `join_rate` a second, with the rate's "slow down" sentence; the other reader
keeps their own bucket. (bench/fairness.py measures what it buys on a real server.)"""

from __future__ import annotations

import pytest

from rrg_review.app.deps import AUTOSAVE_S
from rrg_review.app.fair import FairLimits, FairQueue
from tests.test_accounts import Clock


@pytest.fixture
def fair():
    clock = Clock()
    # no Gradio queue behind it (blocks without `_queue`): only the rate decides here
    return FairQueue(object(), FairLimits(join_rate=5.0, join_burst=30.0, others_within=5.0),
                     clock), clock


def joins(fair: FairQueue, user: str, n: int) -> list[str | None]:
    return [fair.join_refusal(user, {f"{user}-tab"}) for _ in range(n)]


def test_a_reader_alone_is_never_held_to_the_rate(fair):
    queue, clock = fair
    assert joins(queue, "mallory", 500) == [None] * 500
    clock.now += 10  # alice's last request was long ago: she is not active
    assert queue.enter("alice") is None
    queue.leave("alice")
    clock.now += 6
    assert joins(queue, "mallory", 100) == [None] * 100


def test_while_another_reader_is_active_a_flood_gets_its_burst_then_the_rate(fair):
    queue, clock = fair
    assert queue.enter("alice") is None  # alice is reading
    queue.leave("alice")
    got = joins(queue, "mallory", 40)
    assert got[:30] == [None] * 30
    assert all(g is not None and "more than 5 requests a second" in g for g in got[30:])
    clock.now += 1.0  # one second: five more
    got = joins(queue, "mallory", 8)
    assert got[:5] == [None] * 5 and None not in got[5:]
    # alice's own bucket is untouched by mallory's flood
    assert joins(queue, "alice", 20) == [None] * 20
    # alice stops; once she has been quiet for `others_within`, mallory is alone again
    clock.now += 5.1
    assert joins(queue, "mallory", 100) == [None] * 100


def test_the_bucket_refills_to_its_burst_and_no_further(fair):
    queue, clock = fair
    assert joins(queue, "alice", 1) == [None]
    assert [g is None for g in joins(queue, "mallory", 31)] == [True] * 30 + [False]
    clock.now += 4.0  # alice still counts as active (4 s < 5 s); 20 tokens back
    assert [g is None for g in joins(queue, "mallory", 21)] == [True] * 20 + [False]
    assert joins(queue, "alice", 1) == [None]
    clock.now += 60.0  # a long pause refills to the burst (30), not to 300
    assert joins(queue, "alice", 1) == [None]
    assert [g is None for g in joins(queue, "mallory", 31)] == [True] * 30 + [False]


def test_a_reader_who_flooded_alone_has_no_burst_left_when_another_arrives(fair):
    queue, clock = fair
    for _ in range(100):  # mallory alone, 40 a second for 2.5 s: never refused
        assert joins(queue, "mallory", 1) == [None]
        clock.now += 0.025
    assert queue.enter("alice") is None  # alice arrives
    queue.leave("alice")
    got = joins(queue, "mallory", 10)
    assert None not in got  # no stored burst to spend on the lane alice now needs


def test_a_reader_flipping_studies_fast_beside_another_is_never_refused():
    """What a page did in Chromium (15 Alt+N in 1.5 s: 17 joins, then ~7 a second for 3 s;
    a navigation is two joins, the step and its metrics), with another reader active."""
    clock = Clock()
    queue = FairQueue(object(), FairLimits(), clock)
    for _ in range(17):
        assert queue.enter("bob") is None  # bob's autosave tick: he is reading
        queue.leave("bob")
        assert joins(queue, "alice", 1) == [None]
        clock.now += 1.5 / 17
    for _ in range(21):
        assert joins(queue, "alice", 1) == [None]
        clock.now += 1 / 7


def test_an_open_page_keeps_its_reader_active():
    """Every open tab sends the autosave tick (an unqueued request) each AUTOSAVE_S: a reader
    with a page open must count as active between two ticks."""
    assert FairLimits().others_within > AUTOSAVE_S


def test_out_of_tokens_says_so_without_spending_one(fair):
    """The server's early refusal (before a join's body is read or its session looked up)
    asks only this: it refuses exactly when the full check would refuse on the rate, and it
    spends nothing, so a join it lets through is counted once, by the full check."""
    queue, clock = fair
    assert queue.out_of_tokens("mallory") is None  # alone: never
    assert joins(queue, "mallory", 60) == [None] * 60  # alone, the burst is spent anyway
    assert queue.out_of_tokens("mallory") is None  # still alone
    assert queue.enter("alice") is None  # alice is reading
    queue.leave("alice")
    refused = queue.out_of_tokens("mallory")
    assert refused is not None and "more than 5 requests a second" in refused
    clock.now += 0.3  # 1.5 tokens back: let through, and asking again spends nothing
    assert [queue.out_of_tokens("mallory") for _ in range(5)] == [None] * 5
    got = joins(queue, "mallory", 2)  # one token and a half: one join, then the rate
    assert got[0] is None and got[1] is not None and "requests a second" in got[1]
    assert queue.out_of_tokens("mallory") is not None
