"""The evaluation report as one self-contained HTML file: tables, matplotlib plots inlined as
PNG data URIs, no scripts and no external URLs, every report text escaped; prints cleanly."""

from __future__ import annotations

import base64
import html
import io
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from rrg_review.app.evaluation.results import Evaluation, ReviewRow, ReviewSummary
from rrg_review.core.vocabulary import REXVAL_CATEGORIES, rexval_label
from rrg_review.metrics.base import by_reason
from rrg_review.metrics.registry import key_label

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; font-size: .9em; } figure { margin: .5em 0; } img { max-width: 100%; }
.case td { width: 33%; }
@media print { body { margin: 0; max-width: none; } h2 { break-before: auto; }
  table, figure { break-inside: avoid; } }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: Any, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return _e(value)


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f'<td class="num">{_num(c)}</td>' if isinstance(c, int | float) and not isinstance(
            c, bool) else f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(fig: Figure, alt: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode()
    return f'<figure><img alt="{_e(alt)}" src="data:image/png;base64,{data}"></figure>'


def _likert_plot(review: ReviewSummary) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(review.models)
    fig, ax = plt.subplots(figsize=(6, 2.8))
    width = 0.8 / max(1, len(models))
    for i, m in enumerate(models):
        counts = [review.models[m].likert[str(v)] for v in range(1, 6)]
        ax.bar([v + i * width for v in range(1, 6)], counts, width, label=m)
    ax.set_xlabel("overall quality (Likert)")
    ax.set_ylabel("ratings")
    ax.set_xticks([v + width * (len(models) - 1) / 2 for v in range(1, 6)],
                  [str(v) for v in range(1, 6)])
    ax.legend(fontsize=8)
    return _figure(fig, "Likert distribution per model")


def _errors_plot(review: ReviewSummary) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(review.models)
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 3), squeeze=False)
    for ax, m in zip(axes[0], models, strict=True):
        errors = review.models[m].errors
        y = range(len(REXVAL_CATEGORIES))
        sig = [errors[c]["significant"] for c in REXVAL_CATEGORIES]
        ins = [errors[c]["insignificant"] for c in REXVAL_CATEGORIES]
        ax.barh(y, sig, label="clinically significant", color="#c0392b")
        ax.barh(y, ins, left=sig, label="insignificant", color="#f5b7b1")
        ax.set_yticks(list(y), [rexval_label(c) for c in REXVAL_CATEGORIES], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("errors")
    axes[0][0].legend(fontsize=7)
    return _figure(fig, "ReXVal error counts by category and significance")


def _case(row: ReviewRow, headline: str | None) -> str:
    score = row.metrics.get("draft_vs_reference", {}).get(headline) if headline else None
    meta = (f"{_e(row.source)} · {_e(row.study_key)} · {_e(row.section)} · model "
            f"{_e(row.preset)}" + (f" · reader {_e(row.reader)}" if row.reader else "")
            + (f" · Likert {_e(row.likert)}" if row.likert is not None else "")
            + (f" · {headline} {_num(score)}" if score is not None else ""))
    return (f'<p class="note">{meta}</p><table class="case"><tr><th>draft</th><th>final</th>'
            f"<th>reference</th></tr><tr><td>{_e(row.draft)}</td><td>{_e(row.final)}</td>"
            f"<td>{_e(row.reference)}</td></tr></table>")


def render(ev: Evaluation) -> str:
    """The self-contained HTML report (inline style, no scripts or external files), so it can
    be mailed or archived as one file; every text from the database is HTML-escaped.

    Args:
        ev: the computed evaluation.

    Returns:
        The HTML document.
    """
    parts = [*_head(ev), *_evaluated(ev), *_automatic(ev), *_review(ev), *_edits(ev),
             *_agreement(ev), *_aids(ev), *_cases(ev), "</body></html>"]
    return "\n".join(p for p in parts if p)


def _head(ev: Evaluation) -> list[str]:
    """The document's head, title and the filters it covers."""
    parts = [f"<!doctype html><html lang=en><head><meta charset=utf-8>"
             f"<title>rrg-review evaluation report</title><style>{STYLE}</style></head><body>",
             "<h1>rrg-review evaluation report</h1>",
             f'<p class="note">Generated {_e(ev.generated_at)} · filters: '
             + (", ".join(f"{_e(k)}={_e(v)}" for k, v in ev.filters.items() if v) or "none")
             + (" · study ids are the datasets' own keys" if ev.filters.get("dataset_keys")
                in (True, "True") else " · study ids are opaque keyed pseudonyms") + "</p>"]
    return parts


def _evaluated(ev: Evaluation) -> list[str]:
    """What was evaluated: models, sources, readers."""
    parts: list[str] = []
    parts.append('<h2 id="evaluated">What was evaluated</h2>')
    parts.append(_table(["model preset", "model id", "revision", "studies"],
                        [[m.preset, m.model_id, m.revision or "—", m.studies]
                         for m in ev.models]))
    parts.append(f"<p>Sources: {', '.join(f'{_e(s)} ({n} studies)' for s, n in ev.sources.items())}"
                 f" · readers: {_e(', '.join(ev.readers) or 'none')} · rows: {len(ev.rows)}</p>")
    return parts


def _automatic(ev: Evaluation) -> list[str]:
    """Automatic metrics with confidence intervals, and the paired comparison."""
    parts: list[str] = []
    parts.append('<h2 id="automatic">Automatic metrics</h2>')
    parts.append(_table(["model", "section", "source", "metric", "value", "95% CI", "n"],
                        [[a.model, a.section, a.source, key_label(a.key), a.value,
                          "—" if a.ci[0] is None else f"{_num(a.ci[0])} – {_num(a.ci[1])}",
                          a.n]
                         for a in ev.automatic]))
    if ev.unavailable:
        parts.append("<p><b>Unavailable metrics</b></p><ul>" + "".join(
            f"<li>{_e(', '.join(keys))}: {_e(why)}</li>"
            for why, keys in by_reason(ev.unavailable).items())
            + "</ul>")
    if ev.paired:
        parts.append("<h3>Paired comparison between models</h3>")
        parts.append(_table(["section", "model A", "model B", "metric", "A", "B", "A − B",
                             "p (randomization)", "n"],
                            [[p.section, p.model_a, p.model_b, p.result.key, p.result.a,
                              p.result.b, p.result.difference, p.result.p_value, p.result.n]
                             for p in ev.paired]))
    return parts


def _review(ev: Evaluation) -> list[str]:
    """The radiologists' ratings, ReXVal errors and time on task."""
    parts: list[str] = []
    parts.append('<h2 id="review">Radiologist review</h2>')
    if ev.review.models:
        parts.append(_table(
            ["model", "ratings", "accepted without changes", "mean active minutes",
             *[f"Likert {v}" for v in range(1, 6)]],
            [[m, r.ratings, r.accepted_share, r.active_minutes_mean,
              *[r.likert[str(v)] for v in range(1, 6)]]
             for m, r in ev.review.models.items()]))
        parts.append(_likert_plot(ev.review))
        parts.append(_table(["model", "category", "clinically significant", "insignificant"],
                            [[m, rexval_label(c), r.errors[c]["significant"],
                              r.errors[c]["insignificant"]]
                             for m, r in ev.review.models.items() for c in REXVAL_CATEGORIES]))
        parts.append(_errors_plot(ev.review))
        t = ev.review.time_on_task
        parts.append(_table(["time on task (active minutes, rated studies)", "mean", "n"],
                            [["with a draft", t.with_draft_minutes, t.n_with_draft],
                             ["without a draft", t.without_draft_minutes,
                              t.n_without_draft]]))
    else:
        parts.append('<p class="note">No ratings match the filters.</p>')
    return parts


def _edits(ev: Evaluation) -> list[str]:
    """How much readers changed the drafts (word error rate)."""
    parts: list[str] = []
    parts.append('<h2 id="edits">How much readers changed the drafts</h2>')
    if ev.edits:
        keys = sorted({k for e in ev.edits for k in e.draft_vs_final})
        parts.append(_table(["model", "section", "n", "word error rate", "unchanged share",
                             *[f"{k} (draft vs final)" for k in keys]],
                            [[e.model, e.section, e.n, e.word_error_rate, e.unchanged_share,
                              *[e.draft_vs_final.get(k) for k in keys]]
                             for e in ev.edits]))
        parts.append('<p class="note">Word error rate (WER) of the final text against the '
                     "draft: substituted, deleted and inserted words per draft word, from "
                     "rapidfuzz's word-level Levenshtein distance (0 = accepted as is).</p>")
    else:
        parts.append('<p class="note">No edited drafts match the filters.</p>')
    return parts


def _agreement(ev: Evaluation) -> list[str]:
    """Agreement of metrics with radiologists, and between readers."""
    parts: list[str] = []
    parts.append('<h2 id="metric-agreement">Agreement of metrics with radiologists</h2>')
    parts.append('<p class="note">Kendall\'s tau-b (scipy) between each metric of the draft '
                 "against the reference (per report, mean over its sections) and the reader's "
                 "error counts, as in ReXVal; a good metric correlates negatively.</p>")
    parts.append(_table(["metric", "against", "tau-b", "p", "n"],
                        [[a.metric, a.against, a.value, a.p_value, a.n]
                         for a in ev.metric_agreement]) if ev.metric_agreement else
                 '<p class="note">No rated drafts with metric values.</p>')

    parts.append('<h2 id="reader-agreement">Agreement between readers</h2>')
    parts.append(_table(["on", "statistic", "value", "p", "n (units)"],
                        [[a.on, a.statistic, a.value, a.p_value, a.n]
                         for a in ev.reader_agreement]) if ev.reader_agreement else
                 '<p class="note">No study was rated by more than one reader.</p>')
    return parts


def _aids(ev: Evaluation) -> list[str]:
    """The review aids (issue #22) against what readers did."""
    parts: list[str] = []
    parts.append('<h2 id="suggestion-agreement">Suggested vs confirmed ReXVal counts</h2>')
    parts.append('<p class="note">The counts suggested from each reader\'s edit (draft vs '
                 "their final text, pre-filled in the rating panel) against the counts the "
                 "reader confirmed, per category over the ratings that stored a suggestion: "
                 "summed counts, the share of ratings with the same count, and Cohen's kappa "
                 "(statsmodels) of the category having an error at all.</p>")
    parts.append(_table(["category", "n", "suggested", "confirmed", "same count", "kappa",
                         "p"],
                        [[rexval_label(a.category), a.n, a.suggested, a.confirmed, a.exact,
                          a.kappa, a.p_value] for a in ev.suggestion_agreement])
                 if ev.suggestion_agreement else
                 '<p class="note">No rating stored a suggestion.</p>')

    parts.append('<h2 id="flag-outcomes">Draft flags against what readers edited</h2>')
    parts.append('<p class="note">The draft\'s sentences flagged as the review page flags the '
                 "draft when it opens (reference flags included), against the draft sentences "
                 "the reader changed or removed (no equal sentence in the final, up to case "
                 "and spacing): precision = flagged and edited / flagged, recall = flagged and "
                 "edited / edited; n reviewed sections.</p>")
    parts.append(_table(["flag", "n", "flagged", "edited", "flagged and edited", "precision",
                         "recall"],
                        [[f.kind, f.n, f.flagged, f.edited, f.both, f.precision, f.recall]
                         for f in ev.flag_outcomes]) if ev.flag_outcomes else
                 '<p class="note">No reviewed sections.</p>')
    return parts


def _cases(ev: Evaluation) -> list[str]:
    """The worst and best cases by the headline metric."""
    parts: list[str] = []
    parts.append('<h2 id="cases">Worst and best cases</h2>')
    for case in ev.cases:
        if case.rows:
            parts.append(f"<h3>{_e(case.title)}</h3>"
                         + "".join(_case(r, ev.headline) for r in case.rows))
    return parts
