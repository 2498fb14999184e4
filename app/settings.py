"""One settings object built from CLI flags and environment variables, passed down explicitly."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from db.blobs import BlobStore
from db.engine import database_url, sqlite_path

ENV_DB = "RRG_REVIEW_DB"
ENV_DATA = "RRG_REVIEW_DATA"
ENV_LOG_LEVEL = "RRG_REVIEW_LOG_LEVEL"


def resolve_log_level(flag: str | None, default: str = "WARNING") -> str:
    """`--log-level`, else $RRG_REVIEW_LOG_LEVEL, else the program's default."""
    return (flag or os.environ.get(ENV_LOG_LEVEL) or default).upper()


@dataclass(frozen=True)
class Settings:
    db_url: str
    data_dir: Path
    log_level: str = "WARNING"

    @classmethod
    def from_args(cls, db: str | None = None, data_dir: str | None = None, *,
                  log_level: str | None = None,
                  default_log_level: str = "WARNING") -> Settings:
        """Each value from its flag, else its environment variable, else the default.

        Args:
            db: `--db` (a SQLite path or SQLAlchemy URL).
            data_dir: `--data-dir`.
            log_level: `--log-level`.
            default_log_level: the program's default (the workstation logs INFO, the CLI
                WARNING).
        """
        url = database_url(db or os.environ.get(ENV_DB))
        chosen = data_dir or os.environ.get(ENV_DATA)
        if chosen:
            folder = Path(chosen)
        else:
            path = sqlite_path(url)
            folder = path.with_name(path.stem + "-data") if path else Path("rrg-review-data")
        level = resolve_log_level(log_level, default_log_level)
        return cls(db_url=url, data_dir=folder.expanduser().resolve(), log_level=level)

    def log_file(self) -> Path:
        """`<db name>.log` beside a SQLite database (a server database: in the data folder),
        so the log of a review session sits where its data is."""
        path = sqlite_path(self.db_url)
        if path is not None:
            return path.with_suffix(".log")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.data_dir / "rrg-review.log"

    @property
    def blobs(self) -> BlobStore:
        return BlobStore(self.data_dir / "blobs")
