"""The browser tests' apps, started from a fork server that has already imported what every app
start imports.

`python launch.py` spends about 6 s of CPU before it serves (quiet machine): 3 s importing
Gradio, 2.3 s importing nltk through rouge_score (the metrics panel's lexical metrics), 0.8 s
matplotlib, then building the page. The browser tests start about 70 apps, one per test, so
those imports were a fifth of the suite's CPU. Here a `multiprocessing` fork server imports
them once per test worker (`PRELOAD`), and each app is a fork of it that runs `serve.main`
with the test's arguments, environment, working folder and log file: its own process, its own
port, database and folders, the real start-up from argument parsing on, only without
importing the same modules again. `tests/test_cli_and_app.py`, `tests/test_server_security.py`
and `bench.first_page` still start `launch.py` as a whole new interpreter.

The bench scripts of `tests/test_bench_smoke.py` are forks of the same server (`run_module`:
`python -m bench.X ARGV` as `-m` runs it), with what they import beyond the apps (torch,
transformers) preloaded where the bench module is the first of its worker to start one.

The fork server is started from a fresh interpreter (not forked from the test process, whose
Playwright threads and pipes a fork would copy) and never runs an app itself: no threads,
sockets or database connections exist before a fork."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

# what `serve.main` and `_serve` import, and the warm-up's imports (see app/warmup.py)
PRELOAD = [
    "tests.app_process",
    "rrg_review.app.serve", "rrg_review.app.server", "rrg_review.app.page",
    "rrg_review.app.deps", "rrg_review.app.setup", "rrg_review.app.warmup",
    "rrg_review.app.accounts.service", "rrg_review.app.drafting.service",
    "rrg_review.app.evaluation.export", "rrg_review.app.evaluation.study_metrics",
    "rrg_review.app.review.service", "rrg_review.app.viewer.service",
    "rrg_review.app.worklist.service", "rrg_review.app.reader_study.reading",
    "rrg_review.app.reader_study.service", "rrg_review.db.engine",
    "rouge_score.rouge_scorer", "matplotlib.pyplot",
    # imported on the way to serving, measured in a forked app (0.6 -> 0.5 CPU-s a start):
    # the migrations check (alembic and its templates), what Gradio's app and uvicorn load
    "alembic.command", "alembic.config", "alembic.runtime.migration", "alembic.script",
    "alembic.autogenerate", "mako.template", "pydantic.v1", "appdirs", "netrc", "tomllib",
    "uvicorn", "uvicorn.protocols.http.h11_impl", "uvicorn.lifespan.on",
    "anyio._backends._asyncio",
]
# imported after everything else the fork server imports: freezes its heap (see the module)
FREEZE = "tests.frozen_heap"
# the environment the fork server imports under: what the apps of the tests are started with
# (huggingface_hub reads HF_HUB_OFFLINE when imported; a server draws with agg)
IMPORT_ENV = {"HF_HUB_OFFLINE": "1", "MPLBACKEND": "agg"}


def run_app(argv: list[str], log: str, environ: dict[str, str], cwd: str) -> None:
    """The app process: `launch.py ARGV` with this environment and working folder, its output
    appended to `log`."""
    out = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    _enter(environ, cwd, ["launch.py", *argv])
    from rrg_review.app.serve import main

    code: int | str | None = 0
    try:
        code = main(argv)
    finally:
        _at_exit()
    sys.exit(code)


def _enter(environ: dict[str, str], cwd: str, argv: list[str]) -> None:
    """A fork's own environment, working folder and command line."""
    os.environ.clear()
    os.environ.update(environ)
    tempfile.tempdir = None  # found again from this TMPDIR (the fork server may have cached one)
    os.chdir(cwd)
    sys.argv = argv


def _at_exit() -> None:
    """A forked process ends with os._exit: run what an interpreter runs at its exit."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()


def run_module_main(module: str, argv: list[str], out: str, err: str, environ: dict[str, str],
                    cwd: str) -> None:
    """The process of `python -m MODULE ARGV` with this environment and working folder, its
    standard output and error written to the files `out` and `err`."""
    for path, fd in ((out, 1), (err, 2)):
        opened = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CREAT, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    _enter(environ, cwd, [module, *argv])  # (runpy puts the module's file first)
    code: int | str | None = 0
    try:
        # what `python -m` itself calls: the module runs as this process's __main__ (which
        # multiprocessing's spawned children name __mp_main__ in what they send back; with
        # `runpy.run_module` the script's classes lived in a stand-in module, and a result a
        # writer of bench.writers sent could not be unpickled)
        runpy._run_module_as_main(module)  # type: ignore[attr-defined]
    except SystemExit as stop:
        code = stop.code
    finally:
        _at_exit()
    sys.exit(code)


class Finished(NamedTuple):
    """What `subprocess.run(..., capture_output=True, text=True)` says of a finished run."""

    returncode: int
    stdout: str
    stderr: str


def run_module(module: str, argv: list[str], environ: Mapping[str, str], cwd: Path,
               timeout: float, preload: Sequence[str] = ()) -> Finished:
    """`python -m MODULE ARGV` as a fork of the fork server, to its end (killed after `timeout`
    seconds, then exit code -9). `preload`: modules the server imports beyond the apps' when
    this call starts it."""
    if preload:
        _CONTEXT.set_forkserver_preload([*PRELOAD, *preload, FREEZE])
    with tempfile.TemporaryDirectory(prefix="run-module-") as folder:
        out, err = os.path.join(folder, "out"), os.path.join(folder, "err")
        process = _CONTEXT.Process(target=run_module_main, name=module, daemon=False,
                                   args=(module, list(argv), out, err, dict(environ), str(cwd)))
        with _environment(IMPORT_ENV):
            process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
        with open(out, errors="replace") as o, open(err, errors="replace") as e:
            return Finished(process.exitcode if process.exitcode is not None else -9,
                            o.read(), e.read())


class AppProcess:
    """`subprocess.Popen`'s face (pid, poll, wait, terminate, kill, returncode) over the
    fork server's process, so the tests and `bench.processes.stop_process` use either."""

    def __init__(self, process: Any) -> None:
        self._process = process
        self.pid = process.pid
        self.args = ["launch.py"]

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def terminate(self) -> None:
        if self._process.exitcode is None:
            self._process.terminate()

    def kill(self) -> None:
        if self._process.exitcode is None:
            self._process.kill()


@contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """`values` in this process's environment for a moment (the fork server copies it)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload([*PRELOAD, FREEZE])


def start_app(argv: list[str], log: Path, environ: Mapping[str, str], cwd: Path) -> AppProcess:
    """Start `launch.py ARGV` as a fork of the (first time: new) fork server."""
    process = _CONTEXT.Process(target=run_app, args=(list(argv), str(log), dict(environ),
                                                     str(cwd)), name="app", daemon=False)
    with _environment(IMPORT_ENV):
        process.start()
    return AppProcess(process)
