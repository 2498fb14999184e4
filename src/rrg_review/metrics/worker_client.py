"""Metrics that run in a metric worker (metrics/worker.py) in their own virtualenv.

`rrg-review metrics setup-worker NAME` creates the environment (`setup_worker`); a
`WorkerMetric` starts the worker on first use, sends pairs as JSON lines and keeps it until
`close()`. Without the environment the metric is `unavailable` with the command to create it; a
worker that cannot start (package missing, no GPU for GREEN) reports its own reason. The worker
is driven by the one worker client (core/worker_client.py): start-up and request timeouts, its
stderr drained into `worker.log`, a hung or crashed worker said in one sentence and replaced on
the next request.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rrg_review.core.user_cache import user_cache_dir
from rrg_review.core.worker_client import WorkerClient, WorkerError, WorkerStartFailed
from rrg_review.metrics.base import Metric, MetricUnavailable, Payload
from rrg_review.metrics.store import METRICS, MetricDef

if TYPE_CHECKING:
    from rrg_review.metrics.config import MetricConfig

log = logging.getLogger(__name__)

STAMP = "rrg-review-worker.json"
WORKER = Path(__file__).with_name("worker.py")


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    key: str
    requirements: tuple[str, ...]  # what pip installs into the worker's environment
    reference: str
    chunk: int
    startup_timeout: float = 900.0  # seconds to load the metric's models
    request_timeout: float = 1800.0  # seconds for one chunk of pairs


SPECS = {
    "selftest": WorkerSpec("selftest", "selftest", (), "stand-in (token-set Jaccard)", 256,
                           startup_timeout=120.0, request_timeout=120.0),
    # the ratescore wheel declares no dependencies: what its modules import, named here
    "ratescore": WorkerSpec("ratescore", "ratescore",
                            ("ratescore==0.6.0", "medspacy==1.3.1", "torch>=2.1,<2.14",
                             "transformers>=4.38,<4.58", "pandas>=1.5,<3"),
                            "RaTEScore 0.6.0 RaTEScore().compute_score (MAGIC-AI4Med)", 64),
    # green-score 0.0.12 declares Requires-Python ==3.12.1: `setup-worker green --python` one
    "green": WorkerSpec("green", "green", ("green-score==0.0.12",),
                        "GREEN (StanfordAIMI/GREEN-RadLlama2-7b), green_score package", 16,
                        startup_timeout=3600.0, request_timeout=3600.0),
}


def workers_root(configured: Path | None = None) -> Path:
    """Where the metric workers' virtualenvs live: the configured folder (`app.settings`:
    $RRG_REVIEW_METRIC_WORKERS), else the user's cache.

    Args:
        configured: the configured folder, or None.

    Returns:
        The folder (it may not exist yet); one sub-folder per worker metric.
    """
    return configured or user_cache_dir() / "metric-workers"


def venv_python(folder: Path) -> Path:
    """Args:
        folder: a virtualenv's folder.

    Returns:
        Its Python interpreter's path for this platform (it may not exist).
    """
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def setup_worker(name: str, folder: Path | None = None, python: str | None = None,
                 pip_args: Sequence[str] = ()) -> Path:
    """Create (or complete) the worker's virtualenv and install its packages; writes a stamp
    with the installed versions (part of the metric's version, so other versions never share
    cached values). Raises RuntimeError with pip's last lines when an install fails.

    Args:
        name: a worker metric ("selftest", "ratescore", "green").
        folder: the virtualenv's folder; None: under `workers_root()`.
        python: the interpreter that creates the virtualenv; None: this one.
        pip_args: extra pip arguments (an index, a wheel folder).

    Returns:
        The virtualenv's folder.

    Raises:
        ValueError: an unknown worker metric.
        RuntimeError: creating the virtualenv or installing failed; names the step.
    """
    if name not in SPECS:
        raise ValueError(f"unknown worker metric {name!r} ({', '.join(SPECS)})")
    spec = SPECS[name]
    folder = Path(folder) if folder else workers_root() / name
    create = [python or sys.executable, "-m", "venv", str(folder)]
    if not spec.requirements:
        create.insert(3, "--without-pip")  # nothing to install: no pip, no registry needed
    if not venv_python(folder).is_file():
        _run(create, f"creating the virtualenv {folder}")
    installed = ""
    if spec.requirements:
        _run([str(venv_python(folder)), "-m", "pip", "install", "--disable-pip-version-check",
              *pip_args, *spec.requirements], f"installing {', '.join(spec.requirements)}")
        installed = _run([str(venv_python(folder)), "-m", "pip", "freeze"], "listing packages")
    stamp = {"metric": name, "requirements": list(spec.requirements),
             "freeze_sha256": hashlib.sha256(installed.encode()).hexdigest(),
             "python": _run([str(venv_python(folder)), "-c",
                             "import sys; print(sys.version.split()[0])"], "python version")
             .strip()}
    (folder / STAMP).write_text(json.dumps(stamp, indent=2) + "\n", encoding="utf-8")
    return folder


def selfcheck(name: str, folder: Path | None = None, timeout: float = 600) -> dict[str, Any]:
    """Run the worker's weight-free check of its package in its environment.

    Args:
        name: a worker metric.
        folder: its virtualenv's folder; None: under `workers_root()`.
        timeout: seconds the check may take before it is stopped and reported.

    Returns:
        The worker's JSON answer ({"ok": True, ...} or {"ok": False, "error"}); when it
        printed no JSON object, {"ok": False} with the last line of its stderr; when its
        interpreter is missing or cannot run, or the check outlasts `timeout`, {"ok": False}
        saying so (never a traceback).
    """
    folder = Path(folder) if folder else workers_root() / name
    python = venv_python(folder)
    try:
        res = subprocess.run([str(python), str(WORKER), "--metric", name, "--selfcheck"],  # noqa: S603
                             capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"the self-check of {name} gave no answer within "
                                      f"{timeout:g} s (interpreter {python})"}
    except OSError as exc:  # missing interpreter, not executable
        return {"ok": False, "error": f"the worker environment of {name} cannot run "
                                      f"{python}: {exc.strerror or exc}; run `rrg-review "
                                      f"metrics setup-worker {name}`"}
    lines = res.stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = None
    if isinstance(result, dict):
        return result
    return {"ok": False, "error": (res.stderr.strip().splitlines() or ["no output"])[-1]}


def _run(cmd: list[str], what: str) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True)  # noqa: S603 - pip/venv commands we build
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-5:])
        raise RuntimeError(f"{what} failed (exit {res.returncode}): {tail}")
    return res.stdout


class WorkerMetric(Metric):
    """A metric computed by a worker process; one value per pair, corpus value the mean."""

    def __init__(self, spec: WorkerSpec, folder: Path | None = None, device: str | None = None,
                 batch_size: int = 8, options: dict[str, Any] | None = None,
                 startup_timeout: float | None = None,
                 request_timeout: float | None = None) -> None:
        self.spec = spec
        self.name = spec.name
        self.keys = (spec.key,)
        self.reference = spec.reference
        self.chunk = spec.chunk
        self.folder = Path(folder) if folder else workers_root() / spec.name
        self.device = device or "auto"
        self.batch_size = batch_size
        self.options = dict(options or {})  # adapter options, e.g. other models for ratescore
        self._client = WorkerClient(f"the {spec.name} worker",
                                    startup_timeout or spec.startup_timeout,
                                    request_timeout or spec.request_timeout,
                                    stderr_log=self.folder / "worker.log")
        self._version = ""
        self._version_key: tuple[int, int] | bool | None = False  # False: never read
        self._started_key: tuple[int, int] | None = None  # the stamp the worker started under

    @property
    def version(self) -> str:  # type: ignore[override]  # read-only: derived from the stamp
        """"worker-NAME-" and the start of the installed packages' hash, re-read whenever the
        environment's stamp changes (a `setup-worker` run while this process lives), so new
        packages never share cached values with the old ones."""
        key = self._stamp_key()
        if key != self._version_key:
            stamp = self._stamp() or {}
            self._version = f"worker-{self.spec.name}-{stamp.get('freeze_sha256', 'none')[:12]}"
            self._version_key = key
        return self._version

    def _stamp_key(self) -> tuple[int, int] | None:
        """The stamp file's (modification time in ns, size); None when it is missing."""
        try:
            st = (self.folder / STAMP).stat()
        except OSError:
            return None
        return st.st_mtime_ns, st.st_size

    def _stamp(self) -> dict[str, Any] | None:
        try:
            stamp: dict[str, Any] = json.loads((self.folder / STAMP).read_text(encoding="utf-8"))
            return stamp
        except (OSError, ValueError):
            return None

    def available(self) -> tuple[bool, str]:
        """Whether the worker's virtualenv exists and was set up (its stamp is there); the
        worker is not started, so a package that fails to load shows on first use.

        Returns:
            (True, "") or (False, where the environment is missing and the command to make it).
        """
        if not venv_python(self.folder).is_file() or self._stamp() is None:
            return False, (f"its worker environment is not set up ({self.folder}); run "
                           f"`rrg-review metrics setup-worker {self.spec.name}`")
        return True, ""

    def cache_id(self) -> str:
        """The worker reports what it loaded (package version, model revisions) on start.

        Returns:
            "name@" and a hash of the reported version and fingerprint; starts the worker.

        Raises:
            MetricUnavailable: the environment is not set up or the worker could not start.
        """
        ready = self._start()
        detail = json.dumps({k: ready.get(k) for k in ("version", "fingerprint")},
                            sort_keys=True)
        return f"{self.spec.name}@{hashlib.sha256(detail.encode()).hexdigest()[:40]}"

    @property
    def _proc(self) -> subprocess.Popen[str] | None:
        """The running worker's process (None when none is)."""
        return self._client.process.proc if self._client.process is not None else None

    def _start(self) -> dict[str, Any]:
        if self._client.running:
            if self._started_key == self._stamp_key():
                return self._client.hello
            log.info("the %s worker environment changed: restarting it", self.spec.name)
            self.close()
        ok, why = self.available()
        started_key = self._stamp_key()
        if not ok:
            raise MetricUnavailable(why)
        cmd = [str(venv_python(self.folder)), str(WORKER), "--metric", self.spec.name,
               "--device", self.device, "--batch-size", str(self.batch_size),
               "--options", json.dumps(self.options)]
        log.info("starting metric worker: %s", " ".join(cmd))
        try:
            ready = self._client.start(cmd)  # the libraries' output goes to worker.log
        except WorkerStartFailed as exc:
            raise MetricUnavailable(f"the {self.spec.name} worker could not start: "
                                    f"{exc.reason.removeprefix('failed to start: ')}") from None
        self._started_key = started_key
        return ready

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        """Send the pairs to the worker (started on first use) and wait for its values.

        Args:
            hyps: generated reports, one per pair.
            refs: reference reports, in the same order.

        Returns:
            Per pair {key: value}; empty for no pairs (no worker is started then).

        Raises:
            MetricUnavailable: the worker could not start.
            RuntimeError: the worker died, answered out of turn, reported an error, or sent
                the wrong number of values.
        """
        if not hyps:
            return []
        self._start()
        reply = self._client.request({"hyps": list(hyps), "refs": list(refs)})
        if "error" in reply:
            raise WorkerError(f"the {self.spec.name} worker failed: {reply['error']}")
        values = reply.get("values")
        if not isinstance(values, list) or len(values) != len(hyps):
            raise WorkerError(f"the {self.spec.name} worker returned "
                              f"{len(values) if isinstance(values, list) else 'no'} values "
                              f"for {len(hyps)} pairs")
        return [{self.spec.key: float(v)} for v in values]

    def close(self) -> None:
        """Ask the worker to shut down (killed after 10 s); the next compute starts a new one."""
        self._client.stop(grace=10)


def worker_metric(name: str, config: MetricConfig) -> WorkerMetric:
    """The registry's factory for worker metrics.

    Args:
        name: a key of SPECS.
        config: the run's settings (workers folder and device apply).

    Returns:
        The metric; its worker is not started.

    Raises:
        KeyError: an unknown worker metric.
    """
    return WorkerMetric(SPECS[name], workers_root(config.workers_dir) / name,
                        device=config.device)


# registered where they are defined, as the in-process metrics are (selftest is a stand-in,
# never asked for by name)
METRICS.add_def(MetricDef("ratescore", (SPECS["ratescore"].key,), (),
                          partial(worker_metric, "ratescore")))
METRICS.add_def(MetricDef("green", (SPECS["green"].key,), (), partial(worker_metric, "green")))
