"""One settings object built from CLI flags and environment variables, passed down explicitly.

Every value is chosen here, once, as flag > environment variable > default; the packages below
(`db`, `model`, `metrics`) never read the environment for these: they get what they need as
arguments (`load_presets(file)`, `MetricConfig(chexbert_weights=..., workers_dir=...)`,
`DrafterOptions(worker_python=...)`, `open_database(url, key=..., busy_timeout_s=...)`).
Library variables (`HF_HUB_OFFLINE`, `TMPDIR`) stay with
the libraries that define them.

Whether weights may be downloaded is decided here too, once and only by the commands that
could download (`downloads`): HF_HUB_OFFLINE, else one short request to the hub. Without
network every command then goes on at once with what is cached, and says what is not.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rrg_review.app.accounts.service import SCRYPT, password_cost
from rrg_review.core.user_cache import user_cache_dir
from rrg_review.db.blobs import BlobStore
from rrg_review.db.engine import (
    DEFAULT_BUSY_TIMEOUT_S,
    Database,
    database_url,
    open_database,
    sqlite_path,
)

if TYPE_CHECKING:  # the metric registry is imported only by the commands that score
    from rrg_review.metrics.registry import MetricConfig
    from rrg_review.model.presets import Preset

log = logging.getLogger(__name__)

ENV_DB = "RRG_REVIEW_DB"
ENV_DATA = "RRG_REVIEW_DATA"
ENV_LOG_LEVEL = "RRG_REVIEW_LOG_LEVEL"
ENV_PRESETS = "RRG_REVIEW_PRESETS"  # a JSON file of extra model presets
ENV_CHEXBERT = "RRG_REVIEW_CHEXBERT"  # a chexbert.pth instead of the hub's copy
ENV_METRIC_WORKERS = "RRG_REVIEW_METRIC_WORKERS"  # where metric workers' virtualenvs live
ENV_KEY = "RRG_REVIEW_KEY"  # the pseudonym key, 64 hex digits (a team's server: no key file)
ENV_BUSY_TIMEOUT = "RRG_REVIEW_BUSY_TIMEOUT"  # seconds a writer waits for another (default 10)
# scrypt's N for new password hashes (default 2^17, OWASP's minimum; 2^14..2^20): a test
# set-up lowers it, a fast server may raise it (app/accounts/service.py)
ENV_PASSWORD_COST = "RRG_REVIEW_PASSWORD_COST"  # noqa: S105 (a variable's name)
# processes an import checks images in when --workers is not given (default: one per core;
# 1: in this process, as the test suite runs imports)
ENV_IMPORT_WORKERS = "RRG_REVIEW_IMPORT_WORKERS"
# a file holding the time (ISO 8601) that reader studies' washouts are judged by, read at each
# decision: tests and a study team replaying a day move a running server's study clock without
# waiting for days (unset, or the file empty: the real time)
ENV_STUDY_CLOCK = "RRG_REVIEW_STUDY_CLOCK"


def choose(flag: str | None, env_name: str, default: str | None = None,
           environ: Mapping[str, str] | None = None) -> str | None:
    """The flag when given, else the environment variable when set and not blank, else the
    default."""
    if flag:
        return flag
    value = (os.environ if environ is None else environ).get(env_name, "").strip()
    return value or default


def _seconds(value: str | None, name: str, default: float) -> float:
    """A non-negative number of seconds; a value that is not one is logged and the default
    used (a typo in a variable must not stop the workstation)."""
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %g", name, value, default)
        return default
    return max(0.0, seconds) if math.isfinite(seconds) else default


def offline_by_choice(environ: Mapping[str, str]) -> bool:
    """Whether the user set HF_HUB_OFFLINE (nothing to warn about then)."""
    from rrg_review.model.hub import offline

    return offline(environ)


def resolve_log_level(flag: str | None, default: str = "WARNING") -> str:
    """`--log-level`, else $RRG_REVIEW_LOG_LEVEL, else the program's default."""
    return (choose(flag, ENV_LOG_LEVEL) or default).upper()


class SettingsError(ValueError):
    """A setting's value that cannot be used, in one sentence naming the variable (the commands
    print it as their error, never a traceback)."""


def _positive_int(value: str | None, name: str) -> int | None:
    """An environment variable's whole number >= 1, None when unset; a bad one is one sentence."""
    if value is None or not value.strip():
        return None
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise SettingsError(f"{name} must be a whole number of at least 1, not {value!r}")
    return number


def _password_cost(value: str | None) -> int:
    """$RRG_REVIEW_PASSWORD_COST as scrypt's N; one sentence naming the variable when bad."""
    try:
        return password_cost(value)
    except ValueError as exc:
        raise SettingsError(f"{ENV_PASSWORD_COST}: {exc}") from None


@dataclass(frozen=True)
class Settings:
    db_url: str
    data_dir: Path
    log_level: str = "WARNING"
    presets_file: str | None = None
    chexbert_weights: str | None = None
    metric_workers_dir: Path | None = None
    # the pseudonym key (hex) for a database with no key file beside it (a team's server)
    pseudonym_key: str | None = field(default=None, repr=False)
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S
    import_workers: int | None = None  # None: one per CPU core
    study_clock_file: Path | None = None  # see ENV_STUDY_CLOCK
    password_cost: int = SCRYPT["n"]  # see ENV_PASSWORD_COST
    # the environment as it was when the settings were built: a worker preset names the
    # variable that holds its interpreter (`python_env`), known only once a preset is chosen
    environ: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_args(cls, db: str | None = None, data_dir: str | None = None, *,
                  log_level: str | None = None, default_log_level: str = "WARNING",
                  presets: str | None = None, chexbert_weights: str | None = None,
                  metric_workers: str | None = None, key: str | None = None,
                  busy_timeout: str | None = None,
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
            key: the pseudonym key, 64 hex digits (else $RRG_REVIEW_KEY, else the key file).
            busy_timeout: seconds a writer waits for another (else $RRG_REVIEW_BUSY_TIMEOUT,
                else 10).
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
            pseudonym_key=choose(key, ENV_KEY, environ=env),
            busy_timeout_s=_seconds(choose(busy_timeout, ENV_BUSY_TIMEOUT, environ=env),
                                    ENV_BUSY_TIMEOUT, DEFAULT_BUSY_TIMEOUT_S),
            import_workers=_positive_int(env.get(ENV_IMPORT_WORKERS), ENV_IMPORT_WORKERS),
            study_clock_file=Path(clock) if (clock := env.get(ENV_STUDY_CLOCK, "").strip())
            else None,
            password_cost=_password_cost(env.get(ENV_PASSWORD_COST)),
            environ=env,
        )

    def open_database(self, url: str | None = None, **options: Any) -> Database:
        """`db.engine.open_database` of these settings' database (or `url`), with the
        pseudonym key and busy timeout they chose; `options` as open_database takes them."""
        return open_database(self.db_url if url is None else url, key=self.pseudonym_key,
                             busy_timeout_s=self.busy_timeout_s, **options)

    def study_clock(self) -> Callable[[], datetime]:
        """The clock reader studies' sessions and washouts are judged by: the real time, or
        the time in `study_clock_file` (read at each call; a missing or empty file: the real
        time; a time without a zone is UTC)."""
        path = self.study_clock_file

        def now() -> datetime:
            text = ""
            if path is not None:
                try:
                    text = path.read_text().strip()
                except OSError:
                    text = ""
            if not text:
                return datetime.now(UTC)
            when = datetime.fromisoformat(text)
            return when if when.tzinfo is not None else when.replace(tzinfo=UTC)

        return now

    @property
    def blobs(self) -> BlobStore:
        return BlobStore(self.data_dir / "blobs")

    @property
    def cache_dir(self) -> Path:
        """This user's folder for what is the same for every database and can be made again
        (~/.cache/rrg-review, beside the score cache and the metric workers): the front-end
        files the server keeps compressed."""
        return user_cache_dir(self.environ.get("HOME"))

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

    @cached_property
    def no_network(self) -> str | None:
        """Why the Hugging Face hub cannot be reached (HF_HUB_OFFLINE, or one short request
        that got no answer), or None; asked once per settings object, by the first command
        step that could download."""
        from rrg_review.model.hub import hub_unreachable

        return hub_unreachable(self.environ)

    @cached_property
    def may_download(self) -> bool:
        """Whether weights missing from the cache may be downloaded now: only when the hub
        answers. Otherwise the libraries are told never to try (HF_HUB_OFFLINE for this
        process), so nothing waits on a network it cannot reach, and a machine without network
        is said once, with the commands that fetch the weights. Decided once per settings
        object; commands that must not download (`--offline`) do not ask."""
        from rrg_review.model.hub import FETCH_METRICS, go_offline

        if self.no_network is None:
            return True
        if not offline_by_choice(self.environ):
            log.warning("%s: weights that are not cached are unavailable, not downloaded "
                        "(fetch them on a machine with network: `%s`, `rrg-review models "
                        "--fetch PRESET`)", self.no_network, FETCH_METRICS)
        go_offline()
        return False

    def downloads(self) -> bool:
        """`may_download` (the hub asked once; without network the libraries are told)."""
        return self.may_download

    def metric_config(self, **options: Any) -> MetricConfig:
        """A MetricConfig carrying what these settings decide (CheXbert weights, the metric
        workers' folder, whether weights may be downloaded: `downloads`); `options` are the
        command's own (device, download, BERTScore)."""
        from rrg_review.metrics.registry import MetricConfig

        if options.get("download", True):
            options["download"] = self.downloads()
        return MetricConfig(chexbert_weights=self.chexbert_weights,
                            workers_dir=self.metric_workers_dir, **options)
