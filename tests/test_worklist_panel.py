"""The worklist panel: its decisions without Gradio, and the real Gradio app through its API
(gradio_client over HTTP): search, filters, paging, Next/Previous, hostile input."""

from __future__ import annotations

import math

import pytest

from bench.synthetic import SyntheticImage, add_studies
from rrg_review.app.accounts.service import AccountService
from rrg_review.app.review.service import ReviewService
from rrg_review.app.worklist.panel import WorklistPanelLogic
from rrg_review.app.worklist.service import WorklistService
from tests.conftest import rg1
from tests.worklist_app import panel_app


@pytest.fixture
def filled(db):
    image = SyntheticImage(rg1(), 1955, 1841)
    ids = add_studies(db, 35, image=image, source="iu", splits=("train", "test"))
    ids += add_studies(db, 5, image=image, source="rex", start=36, report_only_every=5)
    review = ReviewService(db)
    alice = AccountService(review.db).add("alice", None)
    WorklistService(db).assign(alice)
    return db, ids, alice


def test_a_page_of_rows_with_its_label_and_progress(filled):
    db, _ids, alice = filled
    logic = WorklistPanelLogic(WorklistService(db), page_size=10)
    v = logic.view(alice)
    assert [r[1] for r in v.rows] == [f"CXR{i}" for i in range(1, 11)]
    assert v.label == "1-10 of 39 · page 1 / 4" and v.message == ""
    assert v.progress == "**0 / 39 done** · 39 to go (0 in review)"
    assert logic.view(alice, status="new").progress == v.progress  # free with the total
    assert logic.view(alice, search="CXR1").progress is None  # not recounted for a search
    assert logic.view(alice, source="iu").progress is None
    assert logic.view(alice, page=99).label == "31-39 of 39 · page 4 / 4"
    assert logic.view(alice, page=-3).page == 1
    assert logic.view(alice, page=math.nan).page == 1
    assert logic.view(alice, page=None).page == 1
    assert [r[1] for r in logic.view(alice, search="cxr3").rows] == [
        "CXR3", *[f"CXR{i}" for i in range(30, 39)]]  # CXR40 is report-only: not assigned


def test_a_cleared_search_shows_the_page_of_the_open_study(filled):
    """Found in a new-user trial: a study opened through a search, then the search cleared,
    and the list went back to page 1 with the open study pages away. Enter in an empty box
    shows the page holding the open study; a search shows its first page; a study the
    filters leave out (or none open) gives page 1."""
    db, ids, alice = filled
    logic = WorklistPanelLogic(WorklistService(db), page_size=10)
    cxr25 = ids[24]
    cleared = logic.searched(alice, cxr25, "  ")
    assert cleared.page == 3 and "CXR25" in [r[1] for r in cleared.rows]
    assert logic.searched(alice, cxr25, "cxr3").page == 1
    assert logic.searched(alice, None, "").page == 1
    assert logic.searched(alice, cxr25, "", status="done").rows == []
    assert logic.searched(alice, cxr25, "", source="rex").page == 1


def test_hostile_filter_values_give_a_message_not_a_traceback(filled):
    db, _, alice = filled
    logic = WorklistPanelLogic(WorklistService(db), page_size=10)
    bad = logic.view(alice, status="<script>x</script>")
    assert bad.rows == [] and bad.message.startswith("⚠ unknown status")
    assert "<script>" not in bad.message
    assert logic.view(alice, images="sometimes").message.startswith("⚠ unknown image filter")
    missing = logic.view(alice, source="no-such-source")
    assert (missing.rows, missing.label, missing.message) == ([], "No study matches.", "")
    assert logic.view(alice, search="x" * 500).message.startswith("⚠ search text is longer")
    assert logic.view(alice, search="%' OR 1=1 --").rows == []


def test_next_and_previous_follow_the_filters(filled):
    db, ids, alice = filled
    logic = WorklistPanelLogic(WorklistService(db), page_size=10)
    ReviewService(db).rate(alice, ids[1], likert=4, acceptable=True)
    assert logic.target(alice, None, 1) == ids[0]
    assert logic.target(alice, ids[0], 1) == ids[2]  # done studies are skipped
    assert logic.target(alice, ids[2], -1) == ids[0]
    assert logic.target(alice, ids[0], 1, source="rex") == ids[35]
    assert logic.target(alice, ids[0], 1, status="bogus") == ids[2]  # bad filter: ignored
    shown = logic.page_showing(alice, ids[25])
    assert shown is not None and shown.page == 3 and ids[25] in [r[0] for r in shown.rows]
    assert logic.page_showing(alice, ids[25], source="rex") is None


def test_a_reader_with_an_empty_worklist_sees_it_said(db):
    bob = AccountService(db).add("bob", None)
    v = WorklistPanelLogic(WorklistService(db)).view(bob)
    assert v.rows == [] and v.progress == "**No studies on your worklist.**" and v.label == ""


@pytest.mark.slow
def test_the_panel_in_a_running_gradio_app(filled):
    from gradio_client import Client

    db, ids, alice = filled
    with panel_app(db, alice) as running:
        opened = running.opened
        client = Client(running.url, verbose=False)
        table = {"headers": ["id"], "data": [[i] for i in ids[:10]]}
        out = client.predict("", "all", "all", "all", "all", table, api_name="/next_study")
        assert opened == [ids[0]] and f"opened {ids[0]}" in out
        out = client.predict("", "all", "all", "all", "all", table, api_name="/next_study")
        assert opened[-1] == ids[1]
        # searching for a study on page 3, Next takes the table there
        page3 = client.predict("CXR2", "all", "all", "all", "all", api_name="/worklist_search")
        rows, number, label = page3[0], page3[1], page3[2]
        assert [r[1] for r in rows["data"]][:2] == ["CXR2", "CXR20"] and number == 1
        assert label.startswith("1-10 of 11")
        nxt = client.predict("", "all", "all", "all", "all", 1, api_name="/worklist_page")
        assert nxt[1] == 2 and nxt[0]["data"][0][1] == "CXR11"
        far = {"headers": ["id"], "data": [[i] for i in ids[20:30]]}  # page 3 on screen
        out = client.predict("", "all", "all", "all", "all", far, api_name="/next_study")
        assert opened[-1] == ids[2]
        header, rows, number = out[0], out[1], out[2]
        assert header == f"opened {ids[2]}" and number == 1  # the table follows the study
        assert ids[2] in [r[0] for r in rows["data"]]
