"""The plain data a Drafter consumes and produces (no DB, no UI)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


@dataclass(frozen=True, eq=False)  # compared by identity: pixel arrays have no truth value
class InputImage:
    """One image of a study as display pixels (uint8, bone white) with its view."""

    pixels: np.ndarray
    view_position: str | None = None
    view_group: str | None = None  # "frontal" | "lateral" | None
    checksum: str | None = None  # stable key for feature caches

    def pil(self) -> PILImage:
        """The image as an RGB PIL image (what HF image processors expect)."""
        from PIL import Image

        return Image.fromarray(self.pixels).convert("RGB")


@dataclass(frozen=True)
class PriorStudy:
    images: tuple[InputImage, ...] = ()
    findings: str | None = None
    impression: str | None = None

    @property
    def report(self) -> str | None:
        parts = [f"FINDINGS: {self.findings}" if self.findings else "",
                 f"IMPRESSION: {self.impression}" if self.impression else ""]
        return " ".join(p for p in parts if p) or None


@dataclass(frozen=True)
class StudyInput:
    """Everything a model may use to draft one study."""

    study_id: int
    images: tuple[InputImage, ...]
    patient_key: str = ""
    indication: str | None = None
    comparison: str | None = None
    prior: PriorStudy | None = None

    def frontal(self) -> InputImage | None:
        """The first frontal image (PA before AP), else the first image."""
        frontal = [im for im in self.images if im.view_group == "frontal"]
        frontal.sort(key=lambda im: (im.view_position or "").upper() != "PA")
        if frontal:
            return frontal[0]
        return self.images[0] if self.images else None

    def lateral(self) -> InputImage | None:
        return next((im for im in self.images if im.view_group == "lateral"), None)


@dataclass(frozen=True)
class Provenance:
    """Which model wrote a draft, how, where, and how long it took (per study)."""

    preset: str
    model_id: str
    revision: str | None
    generation: dict[str, Any] = field(default_factory=dict)
    device: str | None = None
    dtype: str | None = None
    seconds: float | None = None


@dataclass(frozen=True)
class DraftResult:
    """One section of one study: the text, or the error that prevented it."""

    study_id: int
    section: str
    text: str | None
    provenance: Provenance
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Candidate:
    """A study that has a reference report; images are loaded only if their features are new."""

    study_id: int
    patient_key: str
    image_keys: tuple[str, ...]  # checksums, in the order `load_images` returns them
    load_images: Callable[[], tuple[InputImage, ...]]
    findings: str | None
    impression: str | None
