"""One settings object built from CLI flags and environment variables, passed down explicitly."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from db.blobs import BlobStore
from db.engine import database_url, sqlite_path

ENV_DB = "RRG_REVIEW_DB"
ENV_DATA = "RRG_REVIEW_DATA"


@dataclass(frozen=True)
class Settings:
    db_url: str
    data_dir: Path

    @classmethod
    def from_args(cls, db: str | None = None, data_dir: str | None = None) -> Settings:
        url = database_url(db or os.environ.get(ENV_DB))
        chosen = data_dir or os.environ.get(ENV_DATA)
        if chosen:
            folder = Path(chosen)
        else:
            path = sqlite_path(url)
            folder = path.with_name(path.stem + "-data") if path else Path("rrg-review-data")
        return cls(db_url=url, data_dir=folder.expanduser().resolve())

    @property
    def blobs(self) -> BlobStore:
        return BlobStore(self.data_dir / "blobs")
