"""Drafting use cases: build model inputs from the DB, run a preset, store drafts with provenance,
stream one section, and pre-draft the studies a reader will open next in the background."""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from rrg_review.app.settings import Settings
from rrg_review.core.progress import Progress
from rrg_review.core.vocabulary import SECTIONS
from rrg_review.db.blobs import resolve_uri
from rrg_review.db.engine import ROWS, Database
from rrg_review.db.models import Draft, Image, Patient, ReferenceReport, Study, WorklistItem
from rrg_review.db.store import load_studies, prior_ids_of
from rrg_review.model.base import Drafter
from rrg_review.model.hub import ModelUnavailable
from rrg_review.model.inputs import DraftResult, InputImage, PriorStudy, StudyInput
from rrg_review.model.options import DrafterOptions
from rrg_review.model.presets import DEFAULT_ORDER, Preset, get_preset, load_presets
from rrg_review.studies.pixels import DecodedImage, decode
from rrg_review.studies.records import ImageSource

if TYPE_CHECKING:  # imported where used: numpy (under model.inputs) loads lazily
    import numpy as np

    from rrg_review.model.inputs import Candidate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredDraft:
    """A draft as the UI shows it: text or error, and where it came from."""

    id: int
    study_id: int
    section: str
    preset: str
    text: str | None
    error: str | None
    model_id: str
    revision: str | None
    generation: dict[str, Any]
    device: str | None
    dtype: str | None
    seconds: float | None
    created_at: datetime


@dataclass
class DraftRun:
    preset: str
    studies: int = 0
    drafted: int = 0  # sections stored with text
    failed: int = 0  # sections stored with an error
    skipped: int = 0  # studies that already had drafts
    no_images: int = 0  # report-only studies (no image to draft from): left out, nothing stored
    errors: list[tuple[int, str, str]] = field(default_factory=list)  # (study, section, error)


@dataclass(frozen=True)
class RuntimeConfig:
    """How drafters are built here (from CLI flags / launch options)."""

    device: str | None = None
    dtype: str | None = None
    batch_size: int | None = None
    download: bool = True
    worker_python: str | None = None
    presets_file: str | None = None


class ReaderFirstGate:
    """Serialises use of the one warm model; a reader's request goes ahead of pre-drafting.

    `hold()` is a plain mutex for one step (loading, a batch). `reader()` marks a reader's request
    for its whole duration, which may span threads (Gradio steps a generator on any worker
    thread): while one is open, background holds wait, so pre-drafting yields between studies.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy = False
        self._readers = 0

    @contextmanager
    def reader(self) -> Iterator[None]:
        """Mark a reader's request as open for the `with` block (it holds nothing itself), so
        background `hold`s wait until it ends.

        Returns:
            A context manager; the mark is removed however the block ends.
        """
        with self._cond:
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def hold(self, background: bool = False) -> Iterator[None]:
        """Hold the model for one step (loading, a batch); blocks until it is free.

        Args:
            background: pre-drafting's hold: also waits while any reader's request is open.

        Returns:
            A context manager; the model is released however the block ends.
        """
        with self._cond:
            self._cond.wait_for(lambda: not self._busy and not (background and self._readers))
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    @property
    def readers_waiting(self) -> int:
        with self._cond:
            return self._readers


@dataclass(frozen=True)
class DraftProgress:
    """A Draft click's state while it streams: the text so far and any failed sections."""

    texts: dict[str, str]
    errors: dict[str, str]
    done: bool = False


def default_preset(presets: dict[str, Preset]) -> str:
    """The best preset this machine can run without a download (rrg24-baseline if cached).

    Args:
        presets: the presets known here, by name.

    Returns:
        The first of DEFAULT_ORDER that is known and available, else "retrieval" (which needs
        no model download).
    """
    from rrg_review.model.registry import availability

    for name in DEFAULT_ORDER:
        if name in presets and availability(presets[name])[0]:
            return name
    return "retrieval"


class DraftingService:
    """Owns the one warm drafter; safe to call from the UI and the pre-drafting thread."""

    def __init__(self, db: Database, settings: Settings, runtime: RuntimeConfig | None = None,
                 decoded: Callable[[Image], DecodedImage] | None = None) -> None:
        self.db = db
        self.settings = settings
        self.runtime = runtime or RuntimeConfig()
        self.presets = load_presets(self.runtime.presets_file or settings.presets_file)
        self._decoded = decoded
        self._drafter: Drafter | None = None
        self._gate = ReaderFirstGate()

    # -- the warm model -------------------------------------------------------------------
    def preset(self, name: str) -> Preset:
        """Args:
            name: a preset name.

        Returns:
            The preset of that name.

        Raises:
            UnknownPreset: no preset has this name; the message lists the known ones.
        """
        return get_preset(self.presets, name)

    def drafter(self, name: str) -> Drafter:
        """The drafter for a preset, loaded once and kept warm (one model at a time).

        Args:
            name: a preset name; another preset's warm model is closed first.

        Returns:
            The loaded drafter.

        Raises:
            UnknownPreset: no preset has this name.
        """
        with self._gate.hold():
            return self._warm(name)

    def _warm(self, name: str) -> Drafter:
        """drafter() for a caller that holds the gate."""
        preset = self.preset(name)
        if self._drafter is not None and self._drafter.preset == name:
            return self._drafter
        self._unload()
        from rrg_review.model.registry import load_drafter

        self._drafter = load_drafter(preset, DrafterOptions(
            device=self.runtime.device, dtype=self.runtime.dtype,
            batch_size=self.runtime.batch_size, download=self.runtime.download,
            worker_python=self.settings.worker_python(preset, self.runtime.worker_python),
            feature_dir=self.settings.data_dir / "features", candidates=self.candidates))
        return self._drafter

    def unload(self) -> None:
        """Close the warm model, if any, to free its memory (waits for the step using it)."""
        with self._gate.hold():
            self._unload()

    def _unload(self) -> None:
        if self._drafter is not None:
            self._drafter.close()
            self._drafter = None

    # -- inputs ---------------------------------------------------------------------------
    def _pixels(self, image: Image) -> np.ndarray:
        if self._decoded is not None:
            return self._decoded(image).display
        path = str(resolve_uri(image.uri, self.settings.blobs))
        return decode(ImageSource(name=path, path=path)).display

    def _input_images(self, images: Sequence[Image]) -> tuple[InputImage, ...]:
        return tuple(InputImage(self._pixels(im), im.view_position, im.view_group, im.checksum)
                     for im in images)

    def inputs(self, study_ids: Sequence[int], preset: Preset | None = None) -> list[StudyInput]:
        """Model inputs for a batch of studies (images decoded to display pixels, the most
        recent prior's report and, when the preset reads it, its first image).

        Args:
            study_ids: the studies, in the order of the returned inputs.
            preset: the preset that will draft them (decides whether prior images are read).
        Returns:
            One input per study. The database is read in a fixed number of statements
            whatever the batch size.
        Raises:
            LookupError: a study does not exist.
        """
        want_prior_images = preset is not None and (
            preset.backend == "worker" or "prior" in preset.options.get("images", []))
        with self.db.read() as session:
            studies = {st.id: st for st in load_studies(session, study_ids, patient=True)}
            missing = [sid for sid in study_ids if sid not in studies]
            if missing:
                raise LookupError(f"study {missing[0]} does not exist")
            newest = {sid: ids[0] for sid, ids in
                      prior_ids_of(session, list(studies.values())).items() if ids}
            prior_studies = {p.id: p for p in load_studies(
                session, sorted(set(newest.values())), images=want_prior_images)}
            out = []
            for study_id in study_ids:
                study = studies[study_id]
                p = prior_studies.get(newest.get(study_id, -1))
                prior = None if p is None else PriorStudy(
                    self._input_images(p.images[:1]) if want_prior_images else (),
                    p.reference.findings if p.reference else None,
                    p.reference.impression if p.reference else None)
                out.append(StudyInput(study.id, self._input_images(study.images),
                                      study.patient.key, study.indication, study.comparison,
                                      prior))
        return out

    def candidates(self, after: int = 0) -> Iterator[Candidate]:
        """Studies with a reference report and images, for the retrieval preset; only those
        with an id above `after` (the retrieval index asks for what it has not seen).

        Args:
            after: only studies with a larger id (0: all).

        Returns:
            One candidate per such study, its frontal images chosen (all images when it has no
            frontal one); a study without images yields an empty image tuple. Pixels are
            decoded only when the candidate's image loader is called.
        """
        from rrg_review.model.inputs import Candidate

        rows = {}
        with self.db.read() as session:
            stmt = (select(Study.id, Patient.key, ReferenceReport.findings,
                           ReferenceReport.impression)
                    .join(Patient, Patient.id == Study.patient_id)
                    .join(ReferenceReport, ReferenceReport.study_id == Study.id)
                    .where(Study.id > after))
            for sid, pkey, findings, impression in session.execute(stmt):
                rows[sid] = (pkey, findings, impression)
            images: dict[int, list[Image]] = {}
            for image in session.scalars(select(Image).where(Image.study_id > after)
                                         .order_by(Image.study_id, Image.position)):
                if image.study_id in rows:
                    images.setdefault(image.study_id, []).append(image)
        for sid, (pkey, findings, impression) in rows.items():
            study_images = images.get(sid, [])
            chosen = [im for im in study_images if im.view_group == "frontal"] or study_images
            yield Candidate(sid, pkey, tuple(im.checksum for im in chosen),
                            partial(self._input_images, chosen),
                            findings, impression)

    # -- drafting -------------------------------------------------------------------------
    def pending(self, study_ids: Sequence[int], preset: str,
                sections: Sequence[str] = SECTIONS) -> list[int]:
        """The studies that still lack a successful draft of some section by this preset.

        Args:
            study_ids: the studies to check.
            preset: the preset name.
            sections: the sections each study needs.

        Returns:
            Those studies, in the given order; a stored error does not count as a draft.
        """
        with self.db.read() as session:
            done = set(session.execute(
                select(Draft.study_id, Draft.section).where(
                    Draft.preset == preset, Draft.error.is_(None),
                    Draft.study_id.in_(list(study_ids)))).all())
        return [s for s in study_ids if any((s, sec) not in done for sec in sections)]

    def plan(self, study_ids: Sequence[int], preset: str, sections: Sequence[str] = SECTIONS,
             redo: bool = False) -> tuple[list[int], DraftRun]:
        """The studies a drafting run has to draft, in the given order, and the run's counts:
        report-only studies (no image: nothing to draft from; an error draft for each would
        only repeat that in a Python error's words, found in a new-user trial on Open-i) and,
        unless `redo`, those already drafted are left out.

        Args:
            study_ids: the studies asked for.
            preset: the preset name.
            sections: the sections each study needs.
            redo: draft studies that already have drafts again.

        Returns:
            The studies to draft and a DraftRun with `studies`, `no_images` and `skipped`.
        """
        ids = list(study_ids)
        with self.db.read() as session:
            with_images = set(session.scalars(select(Study.id).where(
                Study.id.in_(ids), Study.image_count > 0)))
        drawable = [sid for sid in ids if sid in with_images]
        todo = drawable if redo else self.pending(drawable, preset, sections)
        return todo, DraftRun(preset=preset, studies=len(ids),
                              no_images=len(ids) - len(drawable),
                              skipped=len(drawable) - len(todo))

    def draft(self, study_ids: Sequence[int], preset: str, sections: Sequence[str] = SECTIONS,
              *, redo: bool = False, batch_size: int | None = None,
              progress: Progress | None = None, background: bool = False) -> DraftRun:
        """Draft studies in batches and store every section (text or error) as it completes.

        `background` (pre-drafting): each batch waits while a reader's request is open, so a
        Draft click never queues behind pre-drafting for more than the batch in progress.
        A study whose images cannot be read gets an error draft for every section and the
        rest of its batch goes on.

        Args:
            study_ids: the studies to draft.
            preset: the preset name.
            sections: the sections to draft.
            redo: draft every study again; False: only those `pending` says lack a draft.
            batch_size: studies per model call; None: the runtime's, else 8.
            progress: called with (studies done, studies to do).
            background: pre-drafting's call (yields to readers between batches).

        Returns:
            The counts of studies, skipped studies, stored sections and errors.

        Raises:
            UnknownPreset: no preset has this name.
            ModelUnavailable: the model cannot be loaded here.
        """
        chosen = self.preset(preset)
        todo, run = self.plan(study_ids, preset, sections, redo)
        size = batch_size or self.runtime.batch_size or 8
        done = 0
        if progress:
            progress(0, len(todo))
        for start in range(0, len(todo), size):
            ids = todo[start:start + size]
            with self._gate.hold(background):
                drafter = self._warm(preset)
                try:
                    inputs = self.inputs(ids, chosen)
                except Exception:  # an unreadable image: one by one, to blame the right study
                    log.info("inputs of studies %s failed; retrying one by one", ids,
                             exc_info=True)
                    inputs = []
                    for sid in ids:
                        try:
                            inputs.extend(self.inputs([sid], chosen))
                        except Exception as exc:
                            log.warning("study %s cannot be drafted: %s: %s", sid,
                                        type(exc).__name__, exc)
                            self._store([_failed(sid, s, preset, exc) for s in sections], run)
                results = drafter.draft(inputs, sections) if inputs else []
            self._store(results, run)
            done += len(ids)
            if progress:
                progress(done, len(todo))
        return run

    def _store(self, results: Sequence[DraftResult], run: DraftRun) -> None:
        if not results:
            return
        # scope=ROWS: drafts are new rows, and the worklist entries they mark "drafted" are
        # locked (in id order) and re-read, so a reader saving meanwhile neither waits for the
        # whole store nor has "in review" turned back into "drafted"
        with self.db.write(scope=ROWS) as session:
            for r in results:
                p = r.provenance
                session.add(Draft(study_id=r.study_id, section=r.section, preset=p.preset,
                                  text=r.text, error=r.error, model_id=p.model_id,
                                  model_revision=p.revision, generation=_jsonable(p.generation),
                                  device=p.device, dtype=p.dtype, seconds=p.seconds))
                if r.error:
                    run.failed += 1
                    run.errors.append((r.study_id, r.section, r.error))
                else:
                    run.drafted += 1
            drafted = {r.study_id for r in results if r.error is None}
            for item in session.scalars(select(WorklistItem).where(
                    WorklistItem.study_id.in_(drafted), WorklistItem.status == "new")
                    .order_by(WorklistItem.id).with_for_update()):
                item.status = "drafted"

    def latest(self, study_id: int, preset: str | None = None) -> dict[str, StoredDraft]:
        """The newest draft of each section (of one preset, or of any).

        Args:
            study_id: the study.
            preset: a preset name; None or "": any preset.

        Returns:
            section -> newest stored draft, which may be a failed one (its `error` set);
            empty when the study has none.
        """
        stmt = select(Draft).where(Draft.study_id == study_id).order_by(Draft.id)
        if preset:
            stmt = stmt.where(Draft.preset == preset)
        with self.db.read() as session:
            return {d.section: _stored(d) for d in session.scalars(stmt)}

    def stream(self, study_id: int, section: str, preset: str) -> Iterator[str]:
        """Yield the growing text of one section, then store it as a draft (errors stored too).

        Args:
            study_id: the study.
            section: the section to draft.
            preset: the preset name.

        Returns:
            An iterator of the text so far (each item the whole text, not a delta).

        Raises:
            RuntimeError: drafting the section failed (the error is stored as its draft).
        """
        for progress in self.stream_study(study_id, preset, [section]):
            if section in progress.errors:
                raise RuntimeError(progress.errors[section])
            yield progress.texts.get(section, "")

    def stream_study(self, study_id: int, preset: str, sections: Sequence[str] = SECTIONS
                     ) -> Iterator[DraftProgress]:
        """A reader's Draft click: the growing text of the sections, each stored as a draft
        (text or error) when complete. It goes ahead of background pre-drafting, and a chat
        preset in "report" mode generates the report once for all sections.

        Args:
            study_id: the study.
            preset: the preset name.
            sections: the sections to draft.

        Returns:
            An iterator of progress states; the last one has `done` set, the final texts and
            the sections that failed with their errors. Model errors do not raise.

        Raises:
            UnknownPreset: no preset has this name.
            LookupError: the study does not exist.
        """
        chosen = self.preset(preset)
        with self._gate.reader():
            with self._gate.hold():
                drafter = self._warm(preset)
                study = self.inputs([study_id], chosen)[0]
            if not drafter.streams:  # retrieval, worker: the text arrives whole, with provenance
                with self._gate.hold():
                    results = drafter.draft([study], sections)
                self._store(results, DraftRun(preset))
                yield _progress(results, done=True)
                return
            if hasattr(drafter, "stream_sections"):
                results = yield from self._stream_together(drafter, study, sections, preset)
            else:
                results = yield from self._stream_each(drafter, study, sections, preset)
            yield _progress(results, done=True)

    def _stream_together(self, drafter: Any, study: StudyInput, sections: Sequence[str],
                         preset: str) -> Generator[DraftProgress, None, list[DraftResult]]:
        steps = drafter.stream_sections(study, sections)
        try:
            while True:
                try:
                    texts = next(steps)
                except StopIteration as stop:  # the generator returns its DraftResults
                    results = list(stop.value)
                    break
                yield DraftProgress(texts, {})
        except Exception as exc:
            log.warning("drafting study %s with %s failed", study.study_id, preset,
                        exc_info=True)
            results = [_failed(study.study_id, s, preset, exc) for s in sections]
        finally:
            steps.close()
        self._store(results, DraftRun(preset))
        return results

    def _stream_each(self, drafter: Drafter, study: StudyInput, sections: Sequence[str],
                     preset: str) -> Generator[DraftProgress, None, list[DraftResult]]:
        texts: dict[str, str] = {}
        results: list[DraftResult] = []
        for section in sections:
            try:
                for text in drafter.stream(study, section):
                    texts[section] = text
                    yield DraftProgress(dict(texts), {})
                result = DraftResult(study.study_id, section, texts.get(section, ""),
                                     drafter.provenance(section))
            except Exception as exc:
                log.warning("drafting %s of study %s with %s failed", section, study.study_id,
                            preset, exc_info=True)
                result = _failed(study.study_id, section, preset, exc)
            self._store([result], DraftRun(preset))
            results.append(result)
        return results


def _progress(results: Sequence[DraftResult], done: bool) -> DraftProgress:
    return DraftProgress({r.section: r.text or "" for r in results if r.error is None},
                         {r.section: r.error for r in results if r.error is not None}, done)


def _failed(study_id: int, section: str, preset: str, exc: BaseException) -> DraftResult:
    from rrg_review.model.inputs import Provenance

    return DraftResult(study_id, section, None, Provenance(preset, preset, None),
                       f"{type(exc).__name__}: {exc}")


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _stored(d: Draft) -> StoredDraft:
    return StoredDraft(d.id, d.study_id, d.section, d.preset, d.text, d.error, d.model_id,
                       d.model_revision, dict(d.generation or {}), d.device, d.dtype, d.seconds,
                       d.created_at)


class PreDrafter:
    """A background thread that drafts studies before the reader opens them.

    Studies are drafted one at a time in queue order (`batch_size` is kept for callers; each
    study holds the model on its own so a reader's Draft click goes next), so `wait_for` can
    tell a page load when the study it opens is drafted. `schedule()` never blocks; a model
    error on one study is stored with that study and the rest go on; an unavailable model
    stops the worker and says why (`unavailable`); `stop()` ends the thread cleanly (the app
    calls it on shutdown).
    """

    def __init__(self, service: DraftingService, preset: str,
                 sections: Sequence[str] = SECTIONS, batch_size: int = 4) -> None:
        self.service = service
        self.preset = preset
        self.sections = tuple(sections)
        self.batch_size = batch_size
        self.unavailable: str | None = None
        self.last_error: str | None = None
        self._queue: deque[int] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._current: int | None = None  # the study being drafted now
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="pre-drafter", daemon=True)
        self._thread.start()

    def schedule(self, study_ids: Sequence[int], first: bool = False) -> None:
        """Queue studies for background drafting, without blocking the caller.

        Args:
            study_ids: the studies; ones already queued are not queued twice. Once the model
                is `unavailable` queued studies are taken off and not drafted.
            first: put them at the head of the queue, in the given order (the study a reader
                is about to open goes before those after it).
        """
        with self._cond:
            if first:
                ahead = list(dict.fromkeys(study_ids))
                rest = [sid for sid in self._queue if sid not in ahead]
                self._queue = deque([*ahead, *rest])
            else:
                for sid in study_ids:
                    if sid not in self._queue:
                        self._queue.append(sid)
            self._cond.notify_all()

    def wait_for(self, study_id: int, timeout: float) -> bool:
        """Wait until a study is neither queued nor being drafted (drafted, failed, or taken
        off because the model is unavailable), so a page load can show its draft.

        Args:
            study_id: the study.
            timeout: seconds to wait at most.

        Returns:
            Whether the study was done with in time.
        """
        with self._cond:
            return self._cond.wait_for(
                lambda: self._stopping or (study_id not in self._queue
                                           and self._current != study_id), timeout)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """True once the queue is empty and nothing is being drafted.

        Args:
            timeout: seconds to wait at most; None: as long as it takes.

        Returns:
            Whether it became idle in time.
        """
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Drop the queue and end the thread after the batch in progress.

        Args:
            timeout: seconds to wait for the thread; it may still be running after that.
        """
        with self._cond:
            self._stopping = True
            self._queue.clear()
            self._cond.notify_all()
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def queued(self, study_id: int) -> bool:
        """Whether a study waits in the queue or is being drafted now."""
        with self._cond:
            return not self._stopping and (study_id in self._queue
                                           or self._current == study_id)

    @property
    def problem(self) -> str | None:
        """What the reader should know about pre-drafting: the model is unavailable (drafting
        stopped), or the last batch failed (drafting goes on; the next batch may succeed)."""
        if self.unavailable:
            return self.unavailable
        if self.last_error:
            return f"background drafting failed: {self.last_error}"
        return None

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stopping)
                if self._stopping:
                    return
                sid = self._queue.popleft()
                self._busy = True
                self._current = sid
            try:
                if self.unavailable is None:
                    # one study per hold of the model: a reader's Draft click goes next
                    self.service.draft([sid], self.preset, self.sections, batch_size=1,
                                       background=True)
                    self.last_error = None
            except ModelUnavailable as exc:
                log.warning("pre-drafting with %s stopped: %s", self.preset, exc)
                self.unavailable = str(exc)
            except Exception as exc:  # never let the thread die: keep the reason for the UI
                log.exception("pre-drafting studies %s with %s failed", [sid], self.preset)
                self.last_error = f"{type(exc).__name__}: {exc}"
            finally:
                with self._cond:
                    self._busy = False
                    self._current = None
                    self._cond.notify_all()
