"""bench.processes.stop_process on real subprocesses: a server that stops on SIGTERM ends
within the grace time, one that ignores it is killed, and neither is left running."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from bench.processes import stop_process

IGNORES_TERM = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('ready', flush=True); time.sleep(60)")


def test_a_process_that_stops_on_sigterm_gives_its_return_code():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert stop_process(proc) == -signal.SIGTERM
    assert proc.returncode == -signal.SIGTERM


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_time():
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    began = time.monotonic()
    assert stop_process(proc, grace_s=0.5) == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - began < 10
    proc.stdout.close()


def test_an_ended_process_is_not_signalled_and_a_terminated_one_only_waited_for():
    done = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    done.wait()
    assert stop_process(done) == 3
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    proc.terminate()
    assert stop_process(proc, terminate=False) == -signal.SIGTERM
