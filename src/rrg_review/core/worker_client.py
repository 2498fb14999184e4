"""The one client of JSON-lines worker processes (drafting workers, metric workers).

A worker is a subprocess in another Python environment that says `{"ready": true, ...}` once
loaded, then answers each request line with one reply line carrying the request's id. Nothing a
worker does can freeze the caller:
- stdout and stderr are each read by a daemon thread; stdout lines go to a queue the caller waits
  on with a deadline, stderr is drained continuously (in bounded pieces, its last lines kept for
  error messages, optionally appended to a log file), so megabytes of warnings never fill a pipe;
- start-up and every request have a time limit; a worker that hangs is killed;
- a worker that exits, hangs, or answers out of step is reported as one sentence (with the last
  thing it wrote on stderr) and discarded, so the next request starts a fresh one;
- lines on stdout that are not JSON objects (a C library printing on fd 1) are skipped and
  logged; they never extend a deadline.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import subprocess
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)

_EOF = object()
STDERR_PIECE = 4096  # characters read from stderr at a time: a line without end stays bounded
TAIL_CHARS = 300  # of stderr, in a one-sentence error


class WorkerError(RuntimeError):
    """The worker could not start, or broke the protocol; the message is one sentence."""


class WorkerTimeout(WorkerError):
    """The worker gave no reply in time (it was killed)."""


class WorkerCrashed(WorkerError):
    """The worker process exited while a reply was awaited."""


class WorkerStartFailed(WorkerError):
    """The worker did not become ready; `reason` is why, without the worker's name."""

    def __init__(self, label: str, reason: str) -> None:
        super().__init__(f"{label} {reason}")
        self.reason = reason


def one_line(text: str, chars: int = TAIL_CHARS) -> str:
    """A worker's own words (a refusal it sent) as one line: lines joined by " | ", at most
    `chars` characters."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines)[:chars]


def last_words(stderr_tail: str, chars: int = TAIL_CHARS) -> str:
    """The last line a worker wrote on stderr (the exception of a Python traceback, the
    "Segmentation fault" of a crash), at most `chars` characters, to close a sentence with;
    the whole tail is in the log at DEBUG."""
    lines = [line.strip() for line in stderr_tail.splitlines() if line.strip()]
    return lines[-1][-chars:] if lines else ""


class WorkerProcess:
    """A started worker: send a request, wait for one JSON reply with a deadline."""

    def __init__(self, cmd: Sequence[str], env: Mapping[str, str] | None = None,
                 tail_lines: int = 40, stderr_log: Path | None = None) -> None:
        try:
            # the worker command is built by this program (a venv's python and our script)
            self.proc = subprocess.Popen(  # noqa: S603 - our own command, no shell
                list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1,
                                         env=dict(env) if env is not None else None)
        except OSError as exc:
            raise WorkerError(f"cannot start worker {cmd[0]}: {exc.strerror or exc}") from exc
        self._lines: queue.Queue[Any] = queue.Queue()
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._tail_lock = threading.Lock()
        self._stderr_log = stderr_log
        self.garbage = 0  # stdout lines that were not JSON objects
        self.last_garbage = ""
        self._readers = [
            threading.Thread(target=self._read_stdout, args=(self.proc.stdout,),
                             name=f"worker-{self.proc.pid}-stdout", daemon=True),
            threading.Thread(target=self._drain_stderr, args=(self.proc.stderr,),
                             name=f"worker-{self.proc.pid}-stderr", daemon=True)]
        for thread in self._readers:
            thread.start()

    # -- readers (threads) ----------------------------------------------------------------
    def _read_stdout(self, stream: IO[str]) -> None:
        with contextlib.suppress(ValueError, OSError):  # closed under us at shutdown
            for line in stream:
                self._lines.put(line)
        self._lines.put(_EOF)

    def _drain_stderr(self, stream: IO[str]) -> None:
        log_file = None
        if self._stderr_log is not None:
            try:
                log_file = open(self._stderr_log, "a", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                logger.warning("cannot write the worker log %s: %s", self._stderr_log, exc)
        with contextlib.suppress(ValueError, OSError):
            for piece in iter(lambda: stream.readline(STDERR_PIECE), ""):
                if log_file is not None:
                    log_file.write(piece)
                    log_file.flush()
                line = piece.rstrip("\n")
                logger.debug("worker %s: %s", self.proc.pid, line)
                with self._tail_lock:
                    self._tail.append(line[:500])
        if log_file is not None:
            log_file.close()

    def stderr_tail(self, chars: int = 2000) -> str:
        with self._tail_lock:
            return "\n".join(self._tail)[-chars:].strip()

    # -- protocol -------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, message: dict[str, Any]) -> None:
        """Write one request; a worker that has gone away raises WorkerCrashed."""
        try:
            assert self.proc.stdin is not None  # noqa: S101 - started with stdin=PIPE
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise self._crashed() from exc

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next JSON object the worker writes, within `timeout` seconds in all (lines that
        are not JSON objects are skipped and do not extend the deadline)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WorkerTimeout(f"no reply within {timeout:g} s") from None
            if line is _EOF:
                raise self._crashed()
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if isinstance(message, dict):
                return message
            # something in the worker wrote to fd 1 behind Python's back: keep it for the log
            self.garbage += 1
            self.last_garbage = line.strip()[:120]
            logger.warning("worker %s wrote a non-protocol line: %.200s", self.proc.pid, line)

    def _crashed(self) -> WorkerCrashed:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        for thread in self._readers:
            thread.join(timeout=2)  # so the stderr tail is complete
        tail = last_words(self.stderr_tail())
        return WorkerCrashed(f"worker exited (code {code})" + (f": {tail}" if tail else ""))

    def stop(self, grace: float = 30.0) -> None:
        """Ask the worker to shut down; kill it if it does not within `grace` seconds."""
        if self.alive:
            with contextlib.suppress(WorkerError):
                self.send({"op": "shutdown"})
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.kill()
        self._close_pipes()

    def kill(self) -> None:
        if self.alive:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self._close_pipes()

    def _close_pipes(self) -> None:
        """Close our ends once the readers have seen end-of-file (closing a pipe another
        thread is reading could block on its buffer lock)."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()
        for thread, stream in zip(self._readers, (self.proc.stdout, self.proc.stderr),
                                  strict=True):
            thread.join(timeout=2)
            if stream is not None and not thread.is_alive():
                with contextlib.suppress(OSError, ValueError):
                    stream.close()


class WorkerClient:
    """One worker at a time, started on demand and discarded after any failure, so that the
    next request gets a fresh one. Not thread-safe: its owner serialises requests.

    Args:
        label: how sentences name the worker ("the ratescore worker").
        startup_timeout: seconds from start to its ready line (loading a model).
        request_timeout: seconds a request may take, unless `request` is given another.
        stderr_log: a file the worker's stderr is appended to, besides the kept tail.
    """

    def __init__(self, label: str, startup_timeout: float, request_timeout: float,
                 stderr_log: Path | None = None) -> None:
        self.label = label
        self.startup_timeout = startup_timeout
        self.request_timeout = request_timeout
        self.stderr_log = stderr_log
        self.process: WorkerProcess | None = None
        self.hello: dict[str, Any] = {}
        self.starts = 0  # worker processes started so far (restarts included)
        self._next_id = 0

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.alive

    def start(self, cmd: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The running worker's ready line, or a new worker's once it says it is ready.

        Args:
            cmd: the worker's command line (used only when none is running).
            env: its environment (None: this process's).

        Returns:
            The worker's ready line ({"ready": true, ...}).

        Raises:
            WorkerStartFailed: it could not be started, exited, said it is not ready, or was
                not ready within `startup_timeout` (then killed); one sentence.
        """
        if self.process is not None and self.process.alive:
            return self.hello
        self.discard()
        try:
            worker = WorkerProcess(cmd, env, stderr_log=self.stderr_log)
        except WorkerError as exc:
            raise WorkerStartFailed(self.label, f"failed to start: {exc}") from None
        self.starts += 1
        try:
            hello = worker.receive(self.startup_timeout)
        except WorkerTimeout:
            tail = last_words(worker.stderr_tail())
            worker.kill()
            raise WorkerStartFailed(self.label, f"did not start within "
                                    f"{self.startup_timeout:g} s" + (f": {tail}" if tail else "")
                                    ) from None
        except WorkerCrashed as exc:
            worker.kill()
            raise WorkerStartFailed(self.label, f"failed to start: {exc}") from None
        if not hello.get("ready"):
            worker.stop(grace=2)
            raise WorkerStartFailed(self.label, "failed to start: "
                                    + one_line(str(hello.get("error") or "no reason given")))
        self.process, self.hello = worker, hello
        return hello

    def request(self, message: Mapping[str, Any], timeout: float | None = None
                ) -> dict[str, Any]:
        """Send one request (given the next id) to the started worker and wait for its reply.

        Args:
            message: the request, without "id".
            timeout: seconds to wait; None: `request_timeout`.

        Returns:
            The reply, whose "id" is the request's.

        Raises:
            WorkerTimeout: no reply in time (the worker was killed).
            WorkerCrashed: the worker exited (or was gone) before replying.
            WorkerError: no worker is started, or it answered another request (stopped).
            Each is one sentence; after any of them the next `start` starts a fresh worker.
        """
        worker = self.process
        if worker is None:
            raise WorkerError(f"{self.label} is not started")
        limit = self.request_timeout if timeout is None else timeout
        self._next_id += 1
        asked = self._next_id
        try:
            worker.send({**message, "id": asked})
            reply = worker.receive(limit)
        except WorkerTimeout:
            tail = last_words(worker.stderr_tail(500))
            garbage = (f"; it wrote {worker.garbage} line(s) that are not protocol, the last "
                       f"{worker.last_garbage!r}" if worker.garbage else "")
            self.discard()
            raise WorkerTimeout(f"{self.label} gave no reply within {limit:g} s and was "
                                f"stopped{garbage}" + (f" ({tail})" if tail else "")) from None
        except WorkerCrashed as exc:
            self.discard()
            raise WorkerCrashed(f"{self.label} crashed: {exc}") from None
        if reply.get("id") != asked:
            self.discard()  # out of step: never pair a reply with the wrong request
            raise WorkerError(f"{self.label} answered request {reply.get('id')!r} when {asked} "
                              "was asked; it was stopped")
        return reply

    def discard(self) -> None:
        """Kill the worker, if any (the next `start` starts a new one)."""
        worker, self.process = self.process, None
        if worker is not None:
            worker.kill()

    def stop(self, grace: float = 30.0) -> None:
        """Ask the worker to shut down (killed after `grace` seconds)."""
        worker, self.process = self.process, None
        if worker is not None:
            worker.stop(grace)
