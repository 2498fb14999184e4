"""A reader study's analysis as files: the JSON others script against, and one self-contained
HTML page (tables, a forest plot of per-reader effects as inline SVG: no script, no external
URL, every text escaped), written atomically so a reader of the file never sees half of it."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from rrg_review.core.files import atomic_write
from rrg_review.reader_study.analysis import (
    ArmSummary,
    OutcomeResult,
    ReaderEffect,
    StudyAnalysis,
)

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: .2em; }
table { border-collapse: collapse; margin: .6em 0 1.2em; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; font-size: .9em; } svg text { font: 12px system-ui, sans-serif; }
@media print { body { margin: 0; max-width: none; } table, svg { break-inside: avoid; } }
"""
LABELS = {"seconds": "reading time (active s)",
          "first_to_last_seconds": "first-to-last keystroke (s)", "accepted": "accepted",
          "likert": "Likert", "words_changed": "words changed", "wer": "edit rate (WER)",
          "errors_significant": "significant errors", "errors_total": "errors (all)"}


def write_json(analysis: StudyAnalysis, path: Path) -> Path:
    return atomic_write(path, json.dumps(analysis.to_json(), indent=2, allow_nan=False) + "\n",
                        mode=0o644)


def write_html(analysis: StudyAnalysis, path: Path) -> Path:
    return atomic_write(path, render(analysis), mode=0o644)


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    return f"{value:.{digits}f}"


def _p(value: float) -> str:
    if not math.isfinite(value):
        return "—"
    return "< 0.001" if value < 0.001 else f"{value:.3f}"


def _table(headers: list[str], rows: list[list[str]], numeric_from: int = 1) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f'<td class="num">{_e(c)}</td>' if i >= numeric_from else f"<td>{_e(c)}</td>"
        for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render(analysis: StudyAnalysis) -> str:
    n = analysis.n
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>rrg-review reader study analysis</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>Reader study analysis</h1>",
        f"<p>{_e(analysis.source)}: {n['readings']} readings analysed ({n['readers']} readers, "
        f"{n['cases']} cases, {n['sessions']} sessions, {n['arms']} arms); reference arm "
        f"<b>{_e(analysis.reference)}</b>; {n['excluded']} excluded.</p>",
        *_arms(analysis.arms), *_effects(analysis), *_forest_section(analysis),
        *_excluded(analysis), *_balance(analysis),
        f"<p class='note'>Software: "
        f"{_e(', '.join(f'{k} {v}' for k, v in analysis.software.items()))}.</p>",
        "</body></html>"]
    return "\n".join(parts)


def _arms(arms: tuple[ArmSummary, ...]) -> list[str]:
    names = sorted({k for a in arms for k in a.outcomes}, key=lambda k: (
        list(LABELS).index(k) if k in LABELS else len(LABELS), k))
    rows = []
    for a in arms:
        row = [a.arm, str(a.n), str(a.readers), str(a.cases)]
        for k in names:
            s = a.outcomes.get(k)
            d = 1 if "seconds" in k else 3
            row.append("—" if s is None else (
                f"{_fmt(s.mean)} (n {s.n})" if k == "accepted" else
                f"{_fmt(s.median, d)} [{_fmt(s.q1, d)}–{_fmt(s.q3, d)}], mean {_fmt(s.mean, d)}"))
        rows.append(row)
    headers = ["arm", "readings", "readers", "cases",
               *(LABELS.get(k, k) + (" share" if k == "accepted" else " median [IQR]")
                 for k in names)]
    return ["<h2>Arms</h2>", _table(headers, rows)]


def _effects(analysis: StudyAnalysis) -> list[str]:
    rows = []
    notes = []
    for name, o in analysis.outcomes.items():
        for c in o.contrasts:
            rows.append([LABELS.get(name, name), c.arm, c.reference, c.scale.replace("_", " "),
                         _fmt(c.estimate), f"{_fmt(c.ci95[0])} – {_fmt(c.ci95[1])}", _p(c.p)])
        for c in o.session_effects if name == "seconds" else ():
            rows.append([LABELS.get(name, name), f"session {c.arm}", f"session {c.reference}",
                         c.scale, _fmt(c.estimate), f"{_fmt(c.ci95[0])} – {_fmt(c.ci95[1])}",
                         _p(c.p)])
        notes += [f"{LABELS.get(name, name)}: {note}" for note in o.notes]
    out = ["<h2>Effects against the reference arm</h2>",
           _table(["outcome", "arm", "against", "scale", "estimate", "95 % CI", "p"], rows,
                  numeric_from=4)]
    seconds = analysis.outcomes.get("seconds")
    if seconds is not None:
        out.append(_model_line(seconds))
    out += [f"<p class='note'>{_e(n)}</p>" for n in notes]
    return out


def _model_line(o: OutcomeResult) -> str:
    re = o.random_effects or {}
    sds = ", ".join(f"{k} SD {_fmt(v)}" for k, v in re.items())
    return (f"<p class='note'>Reading time: {_e(o.model)}; {o.n} readings; {_e(sds)} "
            "(log scale).</p>")


def _forest_section(analysis: StudyAnalysis) -> list[str]:
    seconds = analysis.outcomes.get("seconds")
    if seconds is None or not seconds.per_reader:
        return []
    out = ["<h2>Per-reader effects on reading time</h2>",
           "<p class='note'>Each reader's ratio of reading time (arm / reference), from their "
           "log times less each case's estimated difficulty; the line is the 95 % interval, "
           "the diamond the mixed model's overall ratio.</p>"]
    for c in seconds.contrasts:
        effects = [e for e in seconds.per_reader if e.arm == c.arm]
        out.append(f"<h3>{_e(c.arm)} vs {_e(c.reference)}</h3>")
        out.append(forest_svg(effects, (c.estimate, *c.ci95)))
    return out


def forest_svg(effects: list[ReaderEffect], overall: tuple[float, float, float]) -> str:
    """A forest plot on a log axis: one row per reader, the pooled estimate last."""
    row, top, left, width = 22, 24, 150, 420
    values = [v for e in effects for v in (e.ci95[0], e.ci95[1], e.ratio)] + list(overall)
    finite = [v for v in values if math.isfinite(v) and v > 0] or [1.0]
    lo, hi = math.log(min([*finite, 1.0])), math.log(max([*finite, 1.0]))
    pad = (hi - lo) * 0.05 or 0.1
    lo, hi = lo - pad, hi + pad

    def x(value: float) -> float:
        value = min(max(value, math.exp(lo)), math.exp(hi))
        return left + (math.log(value) - lo) / (hi - lo) * width

    height = top + row * (len(effects) + 2) + 20
    parts = [f'<svg width="{left + width + 140}" '
             f'height="{height}" role="img" aria-label="forest plot">',
             f'<line x1="{x(1.0):.1f}" y1="{top - 10}" x2="{x(1.0):.1f}" '
             f'y2="{height - 20}" stroke="#999" stroke-dasharray="4 3"/>']
    for i, e in enumerate(effects):
        y = top + i * row
        parts += [f'<text x="{left - 8}" y="{y + 4}" text-anchor="end">{_e(e.reader)}</text>',
                  f'<line x1="{x(e.ci95[0]):.1f}" y1="{y}" x2="{x(e.ci95[1]):.1f}" y2="{y}" '
                  'stroke="#333"/>',
                  f'<rect x="{x(e.ratio) - 4:.1f}" y="{y - 4}" width="8" height="8" '
                  'fill="#2a6ebb"/>',
                  f'<text x="{left + width + 8}" y="{y + 4}">{_fmt(e.ratio, 2)} '
                  f'[{_fmt(e.ci95[0], 2)}, {_fmt(e.ci95[1], 2)}]</text>']
    mid = top + (len(effects) + 0.5) * row
    est, clo, chi = overall
    parts += [f'<text x="{left - 8}" y="{mid + 4}" text-anchor="end" font-weight="bold">'
              'all readers</text>',
              f'<polygon points="{x(clo):.1f},{mid} {x(est):.1f},{mid - 6} {x(chi):.1f},{mid} '
              f'{x(est):.1f},{mid + 6}" fill="#c0392b"/>',
              f'<text x="{left + width + 8}" y="{mid + 4}">{_fmt(est, 2)} [{_fmt(clo, 2)}, '
              f'{_fmt(chi, 2)}]</text>']
    for tick in _ticks(math.exp(lo), math.exp(hi)):
        parts.append(f'<text x="{x(tick):.1f}" y="{height - 4}" text-anchor="middle">'
                     f'{tick:g}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _ticks(lo: float, hi: float) -> list[float]:
    candidates = [0.25, 0.5, 0.67, 0.75, 0.8, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0]
    inside = [t for t in candidates if lo <= t <= hi]
    step = max(1, len(inside) // 6)
    return sorted(set(inside[::step]) | ({1.0} if lo <= 1.0 <= hi else set()))


def _excluded(analysis: StudyAnalysis) -> list[str]:
    if not analysis.excluded:
        return ["<h2>Excluded readings</h2><p>None.</p>"]
    rows = [[e.reason, str(e.count), ", ".join(map(str, e.rows))
             + (" …" if e.count > len(e.rows) else "")] for e in analysis.excluded]
    return ["<h2>Excluded readings</h2>",
            _table(["reason", "readings", "rows (first ten)"], rows, numeric_from=1)]


def _balance(analysis: StudyAnalysis) -> list[str]:
    arms = [a.arm for a in analysis.arms]
    cells = {(c.reader, c.arm, c.session): c.n for c in analysis.balance}
    readers = sorted({c.reader for c in analysis.balance})
    headers = ["reader"] + [f"{a} · session {s}" for a in arms for s in analysis.sessions]
    rows = [[r] + [str(cells.get((r, a, s), 0)) for a in arms for s in analysis.sessions]
            for r in readers]
    return ["<h2>Balance (readings per reader, arm and session)</h2>", _table(headers, rows)]
