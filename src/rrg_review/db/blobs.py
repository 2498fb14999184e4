"""Content-addressed files for images that datasets embed as bytes (e.g. interpret-cxr parquet)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from rrg_review.core.files import atomic_write

BLOB_PREFIX = "blob:"


@dataclass(frozen=True)
class BlobStore:
    root: Path

    def put(self, data: bytes, ext: str) -> tuple[str, bool]:
        """Store bytes atomically; returns (uri, created) — created is False if already there."""
        digest = hashlib.sha256(data).hexdigest()
        name = f"{digest}.{ext.lstrip('.')}"
        target = self.root / digest[:2] / name
        if target.exists():
            return BLOB_PREFIX + name, False
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, data)
        return BLOB_PREFIX + name, True

    def path(self, uri: str) -> Path:
        name = uri.removeprefix(BLOB_PREFIX)
        return self.root / name[:2] / name

    def remove(self, uri: str) -> None:
        self.path(uri).unlink(missing_ok=True)


def resolve_uri(uri: str, blobs: BlobStore | None) -> Path:
    """The file behind an image uri (plain path or blob reference)."""
    if uri.startswith(BLOB_PREFIX):
        if blobs is None:
            raise ValueError(f"{uri}: no blob store configured")
        return blobs.path(uri)
    return Path(uri)
