"""Start-up work done before the app takes its first request, so the first page does not pay it.

The first page load took 7-14 s under load (issue #21, defect 7), the same on 4 and 160,000
studies. A profile of the server during that load (py-spy) showed the time in first-use work,
not in the database:
- Gradio wraps every event handler in a matplotlib backend switch, which imports matplotlib
  (and, with no backend configured, pyplot to find one): 1.5-2.5 s under load, paid by the
  first event of the first page (its worklist and its study);
- the metrics panel's lexical metrics import their packages (rouge_score, nltk) on first use;
- the first study's previews are written (PNG) when it is first opened.
Each is done here once, before the port opens, and logged with its seconds.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rrg_review.app.viewer.service import StudyViewer
from rrg_review.metrics.base import Metric

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmUp:
    """Seconds spent on each part of the warm-up (0.0 where there was nothing to do)."""

    matplotlib_s: float
    metrics_s: float
    previews_s: float
    previews: int  # preview files made or found


def _timed(step: Callable[[], int | None]) -> tuple[float, int]:
    began = time.perf_counter()
    count = step() or 0
    return time.perf_counter() - began, count


def _matplotlib() -> None:
    """The import Gradio's per-event backend switch would make on the first event, and pyplot,
    imported here once. A server draws no windows: the backend is fixed to agg, so that switch
    (`matplotlib.use("agg")` around every event) has nothing to do. pyplot is imported now,
    before any thread runs: a browser test under load (15 on 2 cores) caught an event's switch
    calling into pyplot while an export's thread was still importing it ("partially initialized
    module 'matplotlib.pyplot'"), a traceback on the reader's screen."""
    os.environ.setdefault("MPLBACKEND", "agg")
    try:
        import matplotlib
    except ImportError:  # Gradio then skips its switch too
        return
    matplotlib.use("agg")
    import matplotlib.pyplot  # (see above)


def _metrics(metrics: Sequence[Metric]) -> None:
    """Each lexical metric (no model) computed once on a one-word pair: its package is imported
    and its scorer built. Model metrics are left alone (loading one is the panel's business)."""
    for metric in metrics:
        if metric.model_id:
            continue
        try:
            metric.compute(["clear"], ["clear"])
        except Exception as exc:  # the panel reports it properly when it runs
            log.info("warm-up: metric %s not ready (%s)", type(metric).__name__, exc)


def _previews(viewer: StudyViewer, study: int | None) -> int:
    """The preview files of the study the first page opens (written once per image)."""
    if study is None or viewer.preview_dir is None:
        return 0
    view = viewer.open(study)
    for image in view.images:
        viewer.preview_file(image)
    return len(view.images)


def warm_up(viewer: StudyViewer, metrics: Sequence[Metric], first_study: int | None) -> WarmUp:
    """Do the first page's first-use work now; a failure here is logged, never fatal (the
    page then pays it as before)."""
    try:
        mpl_s, _ = _timed(_matplotlib)
        metrics_s, _ = _timed(lambda: _metrics(metrics))
        previews_s, made = _timed(lambda: _previews(viewer, first_study))
    except Exception:
        log.warning("warm-up failed; the first page does that work instead", exc_info=True)
        return WarmUp(0.0, 0.0, 0.0, 0)
    done = WarmUp(mpl_s, metrics_s, previews_s, made)
    log.info("warm-up: matplotlib %.2f s, lexical metrics %.2f s, %d preview(s) %.2f s",
             done.matplotlib_s, done.metrics_s, done.previews, done.previews_s)
    return done
