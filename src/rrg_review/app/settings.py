"""One settings object built from CLI flags and environment variables, passed down explicitly.

Every value is chosen here, once, as flag > environment variable > default; the packages below
(`db`, `model`, `metrics`) never read the environment for these: they get what they need as
arguments (`load_presets(file)`, `MetricConfig(chexbert_weights=..., workers_dir=...)`,
`DrafterOptions(worker_python=...)`). Library variables (`HF_HUB_OFFLINE`, `TMPDIR`) stay with
the libraries that define them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rrg_review.db.blobs import BlobStore
from rrg_review.db.engine import database_url, sqlite_path

if TYPE_CHECKING:  # the metric registry is imported only by the commands that score
    from rrg_review.metrics.registry import MetricConfig
    from rrg_review.model.presets import Preset

ENV_DB = "RRG_REVIEW_DB"
ENV_DATA = "RRG_REVIEW_DATA"
ENV_LOG_LEVEL = "RRG_REVIEW_LOG_LEVEL"
ENV_PRESETS = "RRG_REVIEW_PRESETS"  # a JSON file of extra model presets
ENV_CHEXBERT = "RRG_REVIEW_CHEXBERT"  # a chexbert.pth instead of the hub's copy
ENV_METRIC_WORKERS = "RRG_REVIEW_METRIC_WORKERS"  # where metric workers' virtualenvs live
# processes an import checks images in when --workers is not given (default: one per core;
# 1: in this process, as the test suite runs imports)
ENV_IMPORT_WORKERS = "RRG_REVIEW_IMPORT_WORKERS"


def choose(flag: str | None, env_name: str, default: str | None = None,
           environ: Mapping[str, str] | None = None) -> str | None:
    """The flag when given, else the environment variable when set and not blank, else the
    default."""
    if flag:
        return flag
    value = (os.environ if environ is None else environ).get(env_name, "").strip()
    return value or default


def resolve_log_level(flag: str | None, default: str = "WARNING") -> str:
    """`--log-level`, else $RRG_REVIEW_LOG_LEVEL, else the program's default."""
    return (choose(flag, ENV_LOG_LEVEL) or default).upper()


def _positive_int(value: str | None, name: str) -> int | None:
    """An environment variable's whole number >= 1, None when unset; a bad one is one sentence."""
    if value is None or not value.strip():
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")
    return number


@dataclass(frozen=True)
class Settings:
    db_url: str
    data_dir: Path
    log_level: str = "WARNING"
    presets_file: str | None = None
    chexbert_weights: str | None = None
    metric_workers_dir: Path | None = None
    import_workers: int | None = None  # None: one per CPU core
    # the environment as it was when the settings were built: a worker preset names the
    # variable that holds its interpreter (`python_env`), known only once a preset is chosen
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_args(cls, db: str | None = None, data_dir: str | None = None, *,
                  log_level: str | None = None, default_log_level: str = "WARNING",
                  presets: str | None = None, chexbert_weights: str | None = None,
                  metric_workers: str | None = None,
                  environ: Mapping[str, str] | None = None) -> Settings:
        """Each value from its flag, else its environment variable, else the default.

        Args:
            db: `--db` (a SQLite path or SQLAlchemy URL).
            data_dir: `--data-dir`.
            log_level: `--log-level`.
            default_log_level: the program's default (the workstation logs INFO, the CLI
                WARNING).
            presets: `--presets` (extra model presets, JSON).
            chexbert_weights: `--chexbert-weights` (a chexbert.pth).
            metric_workers: where `metrics setup-worker` puts the metric workers.
            environ: the environment to read (default: this process's).

        Returns:
            The settings every command and the workstation pass down.
        """
        env = dict(os.environ if environ is None else environ)
        url = database_url(choose(db, ENV_DB, environ=env))
        chosen = choose(data_dir, ENV_DATA, environ=env)
        if chosen:
            folder = Path(chosen)
        else:
            path = sqlite_path(url)
            folder = path.with_name(path.stem + "-data") if path else Path("rrg-review-data")
        workers = choose(metric_workers, ENV_METRIC_WORKERS, environ=env)
        return cls(
            db_url=url, data_dir=folder.expanduser().resolve(),
            log_level=(choose(log_level, ENV_LOG_LEVEL, environ=env) or default_log_level).upper(),
            presets_file=choose(presets, ENV_PRESETS, environ=env),
            chexbert_weights=choose(chexbert_weights, ENV_CHEXBERT, environ=env),
            metric_workers_dir=Path(workers).expanduser() if workers else None,
            import_workers=_positive_int(env.get(ENV_IMPORT_WORKERS), ENV_IMPORT_WORKERS),
            environ=env,
        )

    @property
    def blobs(self) -> BlobStore:
        return BlobStore(self.data_dir / "blobs")

    def log_file(self) -> Path:
        """`<db name>.log` beside a SQLite database (a server database: in the data folder),
        so the log of a review session sits where its data is."""
        path = sqlite_path(self.db_url)
        if path is not None:
            return path.with_suffix(".log")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.data_dir / "rrg-review.log"

    def worker_python(self, preset: Preset, flag: str | None = None) -> str | None:
        """The interpreter of a worker preset's environment: `--worker-python`, else the
        variable the preset names (`options.python_env`), else None (the drafter says how to
        set it)."""
        env_name = preset.options.get("python_env")
        return choose(flag, env_name, environ=self.environ) if env_name else flag

    def metric_config(self, **options: Any) -> MetricConfig:
        """A MetricConfig carrying what these settings decide (CheXbert weights, the metric
        workers' folder); `options` are the command's own (device, download, BERTScore)."""
        from rrg_review.metrics.registry import MetricConfig

        return MetricConfig(chexbert_weights=self.chexbert_weights,
                            workers_dir=self.metric_workers_dir, **options)
