"""Gradio's record of its queue's events stays small and is never summarised (app/queue_record.py):
on the real Gradio queue of a page mounted by our server (`build_app`)."""

from __future__ import annotations

import time

import pytest

from rrg_review.app.queue_record import KEEP, RecentEvents, bound_queue_record


def _note(i: int) -> dict[str, object]:
    return {"time": time.time(), "status": "success", "process_time": 0.01,
            "function": f"fn{i % 7}", "session_hash": "tab"}


def test_the_record_keeps_the_last_events_and_a_dropped_note_reads_empty():
    record = RecentEvents(keep=3)
    for i in range(5):
        record[f"e{i}"] = _note(i)
    assert list(record) == ["e2", "e3", "e4"]
    record["e0"]["status"] = "success"  # Gradio's update of a note dropped meanwhile
    assert "e0" not in record and len(record) == 3


@pytest.fixture
def mounted():
    """A Gradio page mounted by our server, as `rrg-review serve` mounts the workstation."""
    import gradio as gr

    from rrg_review.app.server import ServerOptions, build_app

    with gr.Blocks() as blocks:
        box = gr.Textbox()
        gr.Button("go").click(lambda text: text, box, box)
    build_app(blocks, None, None, ServerOptions())
    return blocks


def test_the_served_queue_keeps_its_record_bounded_and_never_summarises_it(mounted):
    queue = mounted._queue
    assert isinstance(queue.event_analytics, RecentEvents)
    for i in range(KEEP + 25):  # what Gradio does as each event joins the queue
        queue.event_analytics[f"event-{i}"] = _note(i)
        queue.compute_analytics_summary(queue.event_analytics)  # ... and after each one ends
    assert len(queue.event_analytics) == KEEP
    assert next(iter(queue.event_analytics)) == "event-25"
    # no pandas summary was built (Gradio's default built one after every event)
    assert queue.cached_event_analytics_summary == {"functions": {}}
    assert queue.event_count_at_last_cache == 0


def test_a_queue_bounded_twice_keeps_its_record(mounted):
    queue = mounted._queue
    queue.event_analytics["kept"] = _note(0)
    assert bound_queue_record(mounted)
    assert "kept" in queue.event_analytics


def test_a_gradio_without_the_record_is_left_alone(caplog):
    class Blocks:
        _queue = object()

    with caplog.at_level("INFO", logger="rrg_review.app.queue_record"):
        assert not bound_queue_record(Blocks())
    assert "nothing to bound" in caplog.text
