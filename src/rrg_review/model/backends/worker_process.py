"""One worker subprocess speaking JSON lines, read so that it can never block the app.

The worker's stdout and stderr are each read by a daemon thread: stdout lines go to a queue the
caller waits on with a timeout, stderr is drained continuously (a worker that prints megabytes of
warnings never fills the pipe and freezes) and its last lines are kept for error messages.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import subprocess
import threading
from collections import deque
from collections.abc import Sequence
from typing import IO, Any

logger = logging.getLogger(__name__)

_EOF = object()


class WorkerError(RuntimeError):
    """The worker could not start, or broke the protocol."""


class WorkerTimeout(WorkerError):
    """The worker gave no reply in time (it is killed)."""


class WorkerCrashed(WorkerError):
    """The worker process exited while a reply was awaited."""


class WorkerProcess:
    """A started worker: send a request, wait for one JSON reply with a timeout."""

    def __init__(self, cmd: Sequence[str], env: dict[str, str], tail_lines: int = 40) -> None:
        try:
            self.proc = subprocess.Popen(list(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
        except OSError as exc:
            raise WorkerError(f"cannot start worker {cmd[0]}: {exc}") from exc
        self._lines: queue.Queue[Any] = queue.Queue()
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._tail_lock = threading.Lock()
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
        with contextlib.suppress(ValueError, OSError):
            for line in stream:
                line = line.rstrip("\n")
                logger.debug("worker %s: %s", self.proc.pid, line)
                with self._tail_lock:
                    self._tail.append(line[:500])

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
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise self._crashed() from exc

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next JSON object the worker writes, within `timeout` seconds."""
        while True:
            try:
                line = self._lines.get(timeout=timeout)
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
            logger.warning("worker %s wrote a non-protocol line: %.200s", self.proc.pid, line)

    def _crashed(self) -> WorkerCrashed:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        for thread in self._readers:
            thread.join(timeout=2)  # so the stderr tail is complete
        tail = self.stderr_tail()
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
