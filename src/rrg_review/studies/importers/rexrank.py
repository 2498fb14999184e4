"""ReXrank benchmark files (`ReXRank_MIMICCXR_test.json`, `ReXRank_IUXray_test.json`,
`ReXRank_CheXpertPlus.json`, ...): a dict keyed by study id, each with `image_path` (a list),
`key_image_path`, `frontal_lateral` (a view per image), `section_findings`,
`section_impression` (bare `NaN` when missing), `context` (one string such as
"Age:50-60.Gender:M.Indication: ...Comparison: ..."), `split`, `report` and, for MIMIC-CXR,
`subject_id`.

Image paths are relative to the dataset's image folder (`mimic-cxr/files`, `iu_xray/images`,
`chexpert_plus/PNG`), MIMIC-CXR's written with a leading "/" (`/p10/p10046166/s5005.../x.jpg`).
The folder is `--images`, else the first of those names found beside the JSON file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from rrg_review.studies.errors import DatasetLayoutError, StudyLoadError
from rrg_review.studies.importers.base import ImportOptions, Item, build
from rrg_review.studies.importers.tables import as_list, head_bytes, read_json_records
from rrg_review.studies.records import ImageSource, StudyRecord, normalise_split, reference, text
from rrg_review.studies.safety import Guard

_IMAGE_DIRS = ("files", "images", "PNG", "png")
_CONTEXT_RE = re.compile(
    r"(Age|Gender|Indication|Comparison|History|Technique)\s*:", re.IGNORECASE)


def parse_context(context: object) -> dict[str, str]:
    """'Age:50-60.Gender:M.Indication: x.Comparison: y' -> {'age', 'sex', 'indication', ...}."""
    value = text(context)
    if value is None:
        return {}
    marks = list(_CONTEXT_RE.finditer(value))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(value)
        body = value[m.end():end].strip()
        name = m.group(1).lower()
        if name in ("age", "gender"):
            body = body.rstrip(".").strip()
        name = {"gender": "sex", "history": "indication"}.get(name, name)
        if body and name not in out:
            out[name] = body
    return out


class ReXrankImporter:
    name = "rexrank"

    def __init__(self, options: ImportOptions) -> None:
        self.options = options

    def detect(self, path: Path) -> bool:
        return bool(self._files(path))

    def _files(self, path: Path) -> list[Path]:
        candidates = [path] if path.is_file() else sorted(path.glob("*.json"))
        return [p for p in candidates
                if b'"section_findings"' in (h := head_bytes(p, 8192)) and b'"image_path"' in h]

    def root(self, path: Path) -> Path:
        return path.parent if path.is_file() else path

    def count(self, path: Path) -> int | None:
        return None

    def _image_root(self, json_path: Path) -> Path:
        if self.options.images is not None:
            return self.options.images
        for name in _IMAGE_DIRS:
            if (json_path.parent / name).is_dir():
                return json_path.parent / name
        return json_path.parent

    def read(self, path: Path) -> Iterator[Item]:
        files = self._files(path)
        if not files:
            raise DatasetLayoutError(str(path), "no ReXrank JSON (with section_findings and "
                                                "image_path) found")
        guard = self.options.guard_for(self.root(path))
        tables = [(f, read_json_records(f, guard)) for f in files]
        for json_path, rows in tables:
            source = "rexrank-" + json_path.stem.removeprefix("ReXRank_").lower()
            image_root = self._image_root(json_path)
            for key, row in rows:
                yield build(str(json_path), self._record, json_path, source, image_root, guard,
                            key, row, record=key)

    @staticmethod
    def _record(json_path: Path, source: str, image_root: Path, guard: Guard, key: str,
                row: object) -> StudyRecord:
        origin = f"{json_path} [{key}]"
        if not isinstance(row, dict):
            raise StudyLoadError(origin, f"record is a {type(row).__name__}, not an object")
        if key is None:
            raise StudyLoadError(origin, "record without a study id (expected a dict keyed by "
                                         "study)")
        paths = as_list(row.get("image_path"))
        if not paths:
            raise StudyLoadError(origin, "record has no image_path")
        views = as_list(row.get("frontal_lateral"))
        if views and len(views) != len(paths):
            raise StudyLoadError(origin, f"{len(paths)} image_path but {len(views)} "
                                         "frontal_lateral values")
        images = []
        for i, rel in enumerate(paths):
            if not isinstance(rel, str):
                raise StudyLoadError(origin, f"image path {rel!r} is not a path")
            # The format writes paths under the image folder with a leading "/": relative.
            file = guard.inside(image_root, rel[1:] if rel.startswith("/") and
                                not rel.startswith("//") else rel, origin)
            view = text(views[i]) if views else None
            images.append(ImageSource(name=str(file), path=str(file), view_position=view,
                                      view_source="metadata" if view else None))
        context = parse_context(row.get("context"))
        split, raw = normalise_split(row.get("split"))
        patient = text(row.get("subject_id")) or str(key)
        demographics = {k: context[k] for k in ("age", "sex") if k in context}
        return StudyRecord(
            source=source,
            study_key=str(key),
            patient_key=patient,
            origin=origin,
            split=split,
            split_raw=raw,
            indication=context.get("indication"),
            comparison=context.get("comparison"),
            demographics=demographics,
            images=tuple(images),
            reference=reference(row.get("section_findings"), row.get("section_impression")),
        )
