"""The offline default: copy the reference report of the most similar other study.

Similarity is the cosine of image features, computed once per image (keyed by its checksum) and
cached in a file: a 32x32 normalised thumbnail by default, or the pooled embedding of a local vision
encoder when the preset names one. The study itself and every study of the same patient are never
candidates, so a reference never leaks into its own draft.

The index is incremental: each draft asks the database only for studies stored since the last
one (by id), and features are appended to a file, never rewritten.

A copied report may compare with the other patient's prior ("unchanged from the previous
radiograph"). When the study being drafted has no prior (`StudyInput.prior` is None), those
sentences are dropped (`model.comparison`); with a prior, the sentences naming a date are (the
other patient's examination dates). The nearest study with text left in every section is used,
and the provenance says how many sentences were removed (`comparisons_removed`,
`dates_removed`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from rrg_review.core.vocabulary import SECTIONS
from rrg_review.model.base import check_sections, stream_whole
from rrg_review.model.comparison import without_comparisons, without_dates
from rrg_review.model.device import Placement
from rrg_review.model.inputs import (  # Candidate: where it was, for its users
    Candidate,
    DraftResult,
    InputImage,
    Provenance,
    StudyInput,
)
from rrg_review.model.options import DrafterOptions
from rrg_review.model.presets import Preset

THUMBNAIL_SIDE = 32
log = logging.getLogger(__name__)


class FeatureCache:
    """checksum -> feature vector, in one append-only file per feature extractor.

    Each record is a 64-byte key, a uint32 length and that many float32 values. A new image
    appends one record (nothing already written is rewritten, so the cost of caching does not
    grow with the collection); a record torn by a killed process is cut off on the next load.
    A cache written by older versions as `<name>.npz` beside the file is read once and carried
    over.
    """

    KEY_BYTES = 64
    SUFFIX = ".features"

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._vectors: dict[str, np.ndarray] = {}
        self._pending: list[tuple[str, np.ndarray]] = []
        self._lock = threading.Lock()
        if path is None:
            return
        if path.is_file():
            self._load(path)
        legacy = path.with_suffix(".npz")
        if legacy.is_file():
            with np.load(legacy) as data:
                for key in data.files:
                    if key not in self._vectors:
                        self.put(key, data[key])

    @classmethod
    def _key_bytes(cls, key: str) -> bytes:
        raw = key.encode()
        if len(raw) > cls.KEY_BYTES:
            import hashlib

            raw = hashlib.sha256(raw).hexdigest().encode()
        return raw.ljust(cls.KEY_BYTES, b" ")

    def _load(self, path: Path) -> None:
        data = path.read_bytes()
        offset, head = 0, self.KEY_BYTES + 4
        while offset + head <= len(data):
            dim = int.from_bytes(data[offset + self.KEY_BYTES:offset + head], "little")
            end = offset + head + 4 * dim
            if end > len(data):
                break
            key = data[offset:offset + self.KEY_BYTES].rstrip(b" ").decode()
            self._vectors[key] = np.frombuffer(data, np.float32, dim, offset + head).copy()
            offset = end
        if offset != len(data):  # a torn last record: drop it so appends stay aligned
            log.warning("feature cache %s: dropping a torn record at byte %d", path, offset)
            with open(path, "r+b") as fh:
                fh.truncate(offset)

    def get(self, key: str) -> np.ndarray | None:
        return self._vectors.get(self._key_bytes(key).rstrip(b" ").decode())

    def put(self, key: str, vector: np.ndarray) -> None:
        name = self._key_bytes(key).rstrip(b" ").decode()
        vector = np.ascontiguousarray(vector, dtype=np.float32).ravel()
        with self._lock:
            if name in self._vectors:
                return
            self._vectors[name] = vector
            self._pending.append((name, vector))

    def __len__(self) -> int:
        return len(self._vectors)

    def save(self) -> None:
        """Append the vectors computed since the last save (one write)."""
        with self._lock:
            if self.path is None or not self._pending:
                return
            blob = b"".join(self._key_bytes(k) + len(v).to_bytes(4, "little") + v.tobytes()
                            for k, v in self._pending)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as fh:
                fh.write(blob)
            self._pending.clear()


class ThumbnailFeatures:
    """A 32x32 area-averaged thumbnail, mean-centred and unit-normalised."""

    name = f"thumbnail-{THUMBNAIL_SIDE}"
    model_id = f"retrieval/{name}"
    revision = None

    def __call__(self, images: Sequence[InputImage]) -> np.ndarray:
        from PIL import Image

        out = []
        for image in images:
            small = Image.fromarray(image.pixels).convert("L").resize(
                (THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.Resampling.BOX)
            v = np.asarray(small, dtype=np.float32).ravel()
            v -= v.mean()
            out.append(v / (np.linalg.norm(v) or 1.0))
        return np.stack(out)


class EncoderFeatures:
    """Pooled embeddings of a local vision encoder (AutoModel + AutoImageProcessor)."""

    def __init__(self, model_id: str, placement: Placement, download: bool = True) -> None:
        import torch
        from transformers import AutoImageProcessor, AutoModel

        from rrg_review.model.hub import resolve

        resolved = resolve(model_id, None, "retrieval", download)
        self.model_id = f"retrieval/encoder:{model_id}"
        self.revision = resolved.revision
        self.name = "encoder-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{model_id}-{resolved.revision}")
        self._torch = torch
        self._placement = placement
        self._processor = AutoImageProcessor.from_pretrained(resolved.path)
        model = AutoModel.from_pretrained(resolved.path, dtype=placement.torch_dtype())
        self._model = model.to(placement.device).eval()

    def __call__(self, images: Sequence[InputImage]) -> np.ndarray:
        inputs = self._processor(images=[im.pil() for im in images], return_tensors="pt")
        pixels = inputs.pixel_values.to(self._placement.device, self._placement.torch_dtype())
        with self._torch.inference_mode():
            out = self._model(pixel_values=pixels)
        pooled = getattr(out, "pooler_output", None)
        if pooled is None:
            pooled = out.last_hidden_state.mean(dim=1)
        v = pooled.float().cpu().numpy().reshape(len(images), -1)
        unit: np.ndarray = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
        return unit


class RetrievalDrafter:
    streams = False

    def __init__(self, preset: Preset, candidates: Callable[[int], Iterable[Candidate]],
                 features: ThumbnailFeatures | EncoderFeatures,
                 feature_dir: Path | None = None) -> None:
        """`candidates(after)` yields the studies with a reference and images whose id is
        greater than `after`: the index asks only for studies it has not seen."""
        self.preset = preset.name
        self.features = features
        self._candidates = candidates
        path = feature_dir / f"{features.name}{FeatureCache.SUFFIX}" if feature_dir else None
        self.cache = FeatureCache(path)
        self._lock = threading.Lock()
        self._entries: list[Candidate] = []
        self._rows: list[np.ndarray] = []
        self._matrix = np.zeros((0, 1), np.float32)
        self._seen = 0  # the highest study id the index has asked about
        # studies left out of the index because their images could not be read (id -> why):
        # told to the reader when nothing else is left, so a moved image folder is not
        # mistaken for "no other patient's study"
        self._skipped: dict[int, str] = {}

    def _vectors(self, keys: Sequence[str | None], load: Callable[[], Sequence[InputImage]]
                 ) -> np.ndarray:
        """Feature rows for images, computing (and caching) only those not seen before."""
        known = [self.cache.get(k) if k else None for k in keys]
        if any(v is None for v in known):
            images = list(load())
            missing = [i for i, v in enumerate(known) if v is None]
            fresh = self.features([images[i] for i in missing])
            for i, vec in zip(missing, fresh, strict=True):
                known[i] = vec
                key = keys[i]
                if key:
                    self.cache.put(key, vec)
        return np.stack([v for v in known if v is not None])  # every row is known now

    @staticmethod
    def _study_vector(rows: np.ndarray) -> np.ndarray:
        v: np.ndarray = rows.mean(axis=0)
        unit: np.ndarray = v / (np.linalg.norm(v) or 1.0)
        return unit

    def _index(self) -> tuple[list[Candidate], np.ndarray]:
        """The index, brought up to date with the studies stored since the last call (one
        query for ids above the last one seen; features only for their new images)."""
        added = False
        for c in self._candidates(self._seen):
            self._seen = max(self._seen, c.study_id)
            if not c.image_keys:
                continue
            try:
                row = self._study_vector(self._vectors(c.image_keys, c.load_images))
            except Exception as exc:  # an unreadable candidate image: it cannot be retrieved
                log.warning("retrieval: study %s left out of the index (%s: %s)", c.study_id,
                            type(exc).__name__, exc)
                self._skipped[c.study_id] = f"{type(exc).__name__}: {exc}"
                continue
            self._entries.append(c)
            self._rows.append(row)
            added = True
        if added:
            self._matrix = np.stack(self._rows)
            self.cache.save()
        return self._entries, self._matrix

    def _query(self, study: StudyInput) -> np.ndarray:
        frontal = [im for im in study.images if im.view_group == "frontal"] or list(study.images)
        if not frontal:
            raise ValueError(f"study {study.study_id} has no image to compare")
        return self._study_vector(self._vectors([im.checksum for im in frontal], lambda: frontal))

    def draft(self, batch: Sequence[StudyInput],
              sections: Sequence[str] = SECTIONS) -> list[DraftResult]:
        sections = check_sections(sections)
        with self._lock:
            entries, matrix = self._index()
            out = []
            for study in batch:
                start = time.perf_counter()
                texts: dict[str, str | None] = {}
                removed: dict[str, int] = {}
                try:
                    hit, similarity, texts, removed = self._nearest(study, entries, matrix,
                                                                    sections)
                    error = None
                except Exception as exc:  # stored as this study's draft error
                    log.warning("retrieval for study %s failed: %s", study.study_id, exc)
                    hit, similarity, error = None, None, f"{type(exc).__name__}: {exc}"
                generation: dict[str, object] = {"features": self.features.name,
                                                 "neighbour_study_id":
                                                     hit.study_id if hit else None,
                                                 "similarity": round(similarity, 4)
                                                 if similarity is not None else None}
                if hit is not None and study.prior is None:
                    # this patient has no prior: sentences comparing with one were dropped
                    generation["comparisons_removed"] = removed
                elif hit is not None and removed:  # the other patient's dates were dropped
                    generation["dates_removed"] = removed
                prov = Provenance(self.preset, self.features.model_id, self.features.revision,
                                  generation, "cpu", "float32", time.perf_counter() - start)
                for section in sections:
                    text = texts.get(section)
                    why = error or (None if text else
                                    "every sentence of the most similar reports compares with "
                                    "a prior study, and this patient has none"
                                    if study.prior is None else
                                    "every sentence of the most similar reports names another "
                                    "patient's examination date")
                    out.append(DraftResult(study.study_id, section, text, prov, why))
            self.cache.save()
            return out

    def _nearest(self, study: StudyInput, entries: list[Candidate], matrix: np.ndarray,
                 sections: Sequence[str]
                 ) -> tuple[Candidate, float, dict[str, str | None], dict[str, int]]:
        """The most similar other patient's study with text in every section, its score, the
        texts to draft and, per section, how many sentences were dropped: those naming a date
        (the other patient's), and for a study without a prior those comparing with one. A
        neighbour left with an empty section ("Stable chest.") is passed over for the next."""
        query = self._query(study)
        scores = matrix @ query if len(entries) else np.zeros(0)
        fallback = None
        for i in np.argsort(-scores, kind="stable"):
            c = entries[i]
            if c.study_id == study.study_id or (study.patient_key and
                                                c.patient_key == study.patient_key):
                continue
            if not all(getattr(c, s) for s in sections):
                continue
            texts: dict[str, str | None] = {s: getattr(c, s) for s in sections}
            # the other patient's dates never; their comparisons only where this one has none
            drop = without_dates if study.prior is not None else without_comparisons
            kept = {s: drop(texts[s]) for s in sections}
            found = (c, float(scores[i]), {s: k.text.strip() or None for s, k in kept.items()},
                     {s: len(k.removed) for s, k in kept.items() if k.removed})
            if all(found[2].values()):
                return found
            fallback = fallback or found
        if fallback is not None:  # every neighbour's text compares: what is left, if any
            return fallback
        if self._skipped:
            first, why = next(iter(self._skipped.items()))
            raise LookupError(
                f"no other patient's study to retrieve from: {len(self._skipped)} stored "
                f"studies were left out because their images could not be read (study {first}: "
                f"{why}); check that the image folders are where they were imported from")
        raise LookupError("no other patient's study with images and a reference report to "
                          "retrieve from; import a dataset with images first")

    def provenance(self, section: str | None = None) -> Provenance:
        return Provenance(self.preset, self.features.model_id, self.features.revision,
                          {"features": self.features.name}, "cpu", "float32")

    def stream(self, study: StudyInput, section: str) -> Iterator[str]:
        return stream_whole(self, study, section)

    def close(self) -> None:
        self.cache.save()


def from_options(preset: Preset, options: DrafterOptions) -> RetrievalDrafter:
    """The registry's builder (model/registry.py): copies from `options.candidates`, compared
    by the preset's image encoder when it names one, else by thumbnails.

    Raises:
        ValueError: no candidates to retrieve from were given.
    """
    from rrg_review.model.device import select

    if options.candidates is None:
        raise ValueError("the retrieval preset needs a database of studies to retrieve from")
    encoder = preset.options.get("encoder")
    features = (EncoderFeatures(encoder, select(options.device, options.dtype),
                                options.download) if encoder else ThumbnailFeatures())
    return RetrievalDrafter(preset, options.candidates, features, options.feature_dir)
