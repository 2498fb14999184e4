"""The offline default: copy the reference report of the most similar other study.

Similarity is the cosine of image features, computed once per image (keyed by its checksum) and
cached in a file: a 32x32 normalised thumbnail by default, or the pooled embedding of a local vision
encoder when the preset names one. The study itself and every study of the same patient are never
candidates, so a reference never leaks into its own draft.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model.base import check_sections
from model.inputs import SECTIONS, DraftResult, InputImage, Provenance, StudyInput
from model.presets import Preset

THUMBNAIL_SIDE = 32


@dataclass(frozen=True)
class Candidate:
    """A study that has a reference report; images are loaded only if their features are new."""

    study_id: int
    patient_key: str
    image_keys: tuple[str, ...]  # checksums, in the order `load_images` returns them
    load_images: Callable[[], tuple[InputImage, ...]]
    findings: str | None
    impression: str | None


class FeatureCache:
    """checksum -> feature vector, kept in one .npz file per feature extractor."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._vectors: dict[str, np.ndarray] = {}
        self._dirty = False
        if path is not None and path.is_file():
            with np.load(path) as data:
                self._vectors = {k: data[k] for k in data.files}

    def get(self, key: str) -> np.ndarray | None:
        return self._vectors.get(key)

    def put(self, key: str, vector: np.ndarray) -> None:
        self._vectors[key] = vector.astype(np.float32)
        self._dirty = True

    def __len__(self) -> int:
        return len(self._vectors)

    def save(self) -> None:
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-", suffix=".npz")
        try:
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, **self._vectors)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._dirty = False


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

    def __init__(self, model_id: str, placement, download: bool = True) -> None:
        import torch
        from transformers import AutoImageProcessor, AutoModel

        from model.hub import resolve

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
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


class RetrievalDrafter:
    streams = False

    def __init__(self, preset: Preset, candidates: Callable[[], Iterable[Candidate]],
                 features: ThumbnailFeatures | EncoderFeatures,
                 feature_dir: Path | None = None) -> None:
        self.preset = preset.name
        self.features = features
        self._candidates = candidates
        self.cache = FeatureCache(feature_dir / f"{features.name}.npz" if feature_dir else None)
        self._lock = threading.Lock()

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
                if keys[i]:
                    self.cache.put(keys[i], vec)
        return np.stack(known)

    @staticmethod
    def _study_vector(rows: np.ndarray) -> np.ndarray:
        v = rows.mean(axis=0)
        return v / (np.linalg.norm(v) or 1.0)

    def _index(self) -> tuple[list[Candidate], np.ndarray]:
        entries, rows = [], []
        for c in self._candidates():
            if not c.image_keys:
                continue
            try:
                rows.append(self._study_vector(self._vectors(c.image_keys, c.load_images)))
            except Exception:  # an unreadable candidate image: that study cannot be retrieved
                continue
            entries.append(c)
        self.cache.save()
        return entries, (np.stack(rows) if rows else np.zeros((0, 1), np.float32))

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
                try:
                    hit, similarity = self._nearest(study, entries, matrix, sections)
                    error = None
                except Exception as exc:
                    hit, similarity, error = None, None, f"{type(exc).__name__}: {exc}"
                prov = Provenance(
                    self.preset, self.features.model_id, self.features.revision,
                    {"features": self.features.name,
                     "neighbour_study_id": hit.study_id if hit else None,
                     "similarity": round(similarity, 4) if similarity is not None else None},
                    "cpu", "float32", time.perf_counter() - start)
                for section in sections:
                    text = getattr(hit, section) if hit else None
                    out.append(DraftResult(study.study_id, section, text, prov, error))
            self.cache.save()
            return out

    def _nearest(self, study: StudyInput, entries: list[Candidate], matrix: np.ndarray,
                 sections: Sequence[str]) -> tuple[Candidate, float]:
        query = self._query(study)
        scores = matrix @ query if len(entries) else np.zeros(0)
        for i in np.argsort(-scores, kind="stable"):
            c = entries[i]
            if c.study_id == study.study_id or (study.patient_key and
                                                c.patient_key == study.patient_key):
                continue
            if all(getattr(c, s) for s in sections):
                return c, float(scores[i])
        raise LookupError("no other patient's study with images and a reference report to "
                          "retrieve from; import a dataset with images first")

    def provenance(self, section: str | None = None) -> Provenance:
        return Provenance(self.preset, self.features.model_id, self.features.revision,
                          {"features": self.features.name}, "cpu", "float32")

    def stream(self, study: StudyInput, section: str) -> Iterator[str]:
        result = self.draft([study], [section])[0]
        if result.error:
            raise RuntimeError(result.error)
        yield result.text or ""

    def close(self) -> None:
        self.cache.save()
