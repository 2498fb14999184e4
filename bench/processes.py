"""Stopping a server the benches and tests started as a subprocess.

"terminate, wait, then kill" was copied into ten places in bench/ and tests/, some waiting after
the kill and some not (a killed app left as a zombie, or a hung one left running when the wait
raised). The tests import it from here (bench/ may be imported by tests, never the reverse)."""

from __future__ import annotations

import subprocess

GRACE_S = 30.0


def stop_process(proc: subprocess.Popen[bytes] | subprocess.Popen[str],
                 grace_s: float = GRACE_S, terminate: bool = True) -> int:
    """Ask `proc` to stop (SIGTERM: uvicorn shuts down gracefully), wait up to `grace_s`
    seconds, then kill it; always wait for it to end, so nothing is left running.

    Args:
        proc: the process.
        grace_s: how long a graceful shutdown may take.
        terminate: False when the caller already sent SIGTERM and only waits now.

    Returns:
        Its return code (negative: the signal that ended it).
    """
    if terminate and proc.poll() is None:
        proc.terminate()
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
