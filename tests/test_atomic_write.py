"""core.files.atomic_write, the one way files are replaced: whole or not at all, private, and
safe with two writers of the same file at once (each has its own temporary file)."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from rrg_review.core.files import atomic_write


def test_bytes_text_and_a_writer_each_land_whole(tmp_path: Path):
    target = tmp_path / "report.csv"
    atomic_write(target, "a,b\r\nü,2\r\n")
    assert target.read_bytes() == "a,b\r\nü,2\r\n".encode()  # newlines untranslated
    atomic_write(target, b"\x00\x01")
    assert target.read_bytes() == b"\x00\x01"
    atomic_write(target, lambda tmp: tmp.write_text("from a writer"))
    assert target.read_text() == "from a writer"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    atomic_write(target, "x", mode=0o644)
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.csv"]


def test_a_failing_writer_keeps_the_old_file_and_leaves_nothing(tmp_path: Path):
    target = tmp_path / "preview.png"
    target.write_text("old")

    def half_then_crash(tmp: Path) -> None:
        tmp.write_text("half")
        raise RuntimeError("encoder died")

    with pytest.raises(RuntimeError, match="encoder died"):
        atomic_write(target, half_then_crash)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["preview.png"]


def test_a_missing_folder_is_an_os_error_naming_it(tmp_path: Path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        atomic_write(tmp_path / "nowhere" / "f.txt", "x")


def test_two_writers_of_one_file_never_mix(tmp_path: Path):
    """Many threads replace the same file with distinct large contents: the file is always one
    writer's whole content (a fixed temporary name would interleave or lose writes)."""
    target = tmp_path / "shared.txt"
    contents = [str(i) * 200_000 for i in range(8)]
    seen: list[str] = []
    stop = threading.Event()

    def read_until_stopped() -> None:
        while not stop.is_set():
            if target.exists():
                seen.append(target.read_text())

    reader = threading.Thread(target=read_until_stopped)
    reader.start()
    writers = [threading.Thread(target=lambda c=c: [atomic_write(target, c) for _ in range(5)])
               for c in contents]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert target.read_text() in contents
    assert all(text in contents for text in seen)
    assert [p.name for p in tmp_path.iterdir()] == ["shared.txt"]
