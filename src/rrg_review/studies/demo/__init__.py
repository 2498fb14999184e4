"""The demo worklist a fresh install starts with: the real RG1 radiograph, reports of our own.

The studies are data (demo_studies.json); this module only turns them into StudyRecords. One study
is stored as a 16-bit PNG rendered from the DICOM (as ReXGradient-160K ships its images), so the
demo exercises both decoding paths.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

from rrg_review.core.files import atomic_write
from rrg_review.studies.dates import parse_date
from rrg_review.studies.records import ImageSource, ReportSections, StudyRecord

SOURCE = "demo"


def _png16(dicom_path: str, target: Path) -> Path:
    """Write the display rendering of a DICOM as a 16-bit grayscale PNG (once)."""
    if target.is_file():
        return target
    import numpy as np
    from PIL import Image

    from rrg_review.studies.pixels import decode

    image = decode(ImageSource(name=dicom_path, path=dicom_path))
    target.parent.mkdir(parents=True, exist_ok=True)
    pixels = Image.fromarray(image.display.astype(np.uint16) * 257)
    return atomic_write(target, lambda tmp: pixels.save(tmp, format="PNG"))


def demo_records(data_dir: Path) -> Iterator[StudyRecord]:
    from pydicom.data import get_testdata_file

    spec = json.loads(files("rrg_review.studies.demo").joinpath("demo_studies.json").read_text())
    for item in spec["studies"]:
        found = get_testdata_file(item["image"])
        if not isinstance(found, str):  # None, or a Dataset when asked to read it
            raise FileNotFoundError(f"pydicom-data does not provide {item['image']}")
        path = found
        if item.get("as_png16"):
            path = str(_png16(path, data_dir / "demo" / f"{item['key']}.png"))
        yield StudyRecord(
            source=SOURCE,
            study_key=item["key"],
            patient_key=item["patient"],
            origin=f"demo:{item['key']}",
            study_date=parse_date(item["date"], item["key"]),
            split=item.get("split"),
            indication=item["indication"],
            comparison=item["comparison"],
            demographics={"sex": item["sex"], "age": item["age"]},
            images=(ImageSource(name=path, path=path, view_position="PA"),),
            reference=ReportSections(item["findings"], item["impression"]),
        )
