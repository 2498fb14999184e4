"""The conflict banner's words (app/review/conflicts.py): the saved text quoted word for word,
its words that are not in the tab's box marked, escaped whatever either text holds."""

from __future__ import annotations

from datetime import UTC, datetime

from rrg_review.app.review.conflicts import LEGEND, conflict_message, quote_against
from rrg_review.app.review.service import RevisionView


def _rev(section: str, text: str, number: int = 4) -> RevisionView:
    return RevisionView(1, section, number, text, False, None,
                        datetime(2026, 12, 3, 14, 5, 9, tzinfo=UTC))


def test_the_quote_marks_the_words_that_differ_from_the_box():
    quote = quote_against("No focal consolidation. Small left effusion.",
                          "No focal consolidation. Small right effusion.")
    assert quote == "No focal consolidation. Small <ins>left</ins> effusion."
    # words only in the box are not quoted: the quote is the saved text, to read or copy
    assert quote_against("Heart normal. Effusion.", "Heart normal. No effusion. Stable.") == \
        "Heart normal. <ins>Effusion.</ins>"


def test_the_same_words_are_quoted_plain_and_nothing_is_explained():
    # (only spacing differs: the diff is of words, as the editor's against the draft)
    quote = quote_against("Heart size normal.", "Heart  size\nnormal.")
    assert quote == "Heart size normal."
    message = conflict_message({"findings": _rev("findings", "Heart size normal.")},
                               {"findings": "Heart  size\nnormal."})
    assert "<ins>" not in message and "<del>" not in message and LEGEND not in message


def test_markup_in_either_text_is_shown_as_text():
    saved = 'Effusion <img src=x onerror="alert(1)"> & <b>clear</b>'
    box = "Effusion <script>alert(2)</script>"
    quote = quote_against(saved, box)
    assert quote == ("Effusion <ins>&lt;img src=x onerror=&quot;alert(1)&quot;&gt; &amp; "
                     "&lt;b&gt;clear&lt;/b&gt;</ins>")


def test_a_held_and_a_told_section_each_say_where_they_stand():
    conflicts = {"findings": _rev("findings", "Lungs are clear."),
                 "impression": _rev("impression", "No acute disease.", 7)}
    boxes = {"findings": "Lungs are clear bilaterally.", "impression": "No acute disease."}
    message = conflict_message(conflicts, boxes, told=frozenset({"impression"}))
    lines = message.split("<br>")
    assert lines[0].startswith("⚠ **findings not saved — it was saved elsewhere (revision 4 "
                               "at 14:05:09).**")
    assert lines[1] == ("⚠ **A newer version of the impression was saved elsewhere (revision 7 "
                        "at 14:05:09).**")
    assert lines[2].startswith("Choose **Keep mine**")
    # the saved word unlike the box's marked; the impression in the box is the saved one: plain
    assert lines[3] == "The saved findings reads: “Lungs are <ins>clear.</ins>”"
    assert lines[4] == "The saved impression reads: “No acute disease.”"
    assert lines[5] == LEGEND


def test_an_empty_box_marks_the_whole_saved_text():
    message = conflict_message({"impression": _rev("impression", "Cardiomegaly.")},
                               {"impression": ""}, told=frozenset({"impression"}))
    assert "You have not changed it in this tab: **Take theirs** shows the newer text." in message
    assert "“<ins>Cardiomegaly.</ins>”" in message
