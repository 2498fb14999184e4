"""The exported files of a fixed review session, byte for byte (timestamps masked) against the
expectation kept in tests/golden/export/: a refactor of the evaluation or its writers must not
change what a research team receives. After a deliberate change of the output, rewrite the
expectation with `python -m tests.test_export_golden` and review its diff."""

from __future__ import annotations

import difflib
import re
import sys
import tempfile
from pathlib import Path

import pytest

from rrg_review.app.evaluation.export import export
from rrg_review.metrics.bertscore import BertScore
from rrg_review.metrics.bleu import Bleu4
from rrg_review.metrics.rouge import RougeL
from tests.export_session import build_review_session

GOLDEN = Path(__file__).parent / "golden" / "export"
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d)?")


def _masked(path: Path, session: Path) -> str:
    """The file's text with its timestamps and the scratch folder of the tiny model masked."""
    text = path.read_text(encoding="utf-8").replace(str(session), "<session>")
    return _TIME.sub("<time>", text)


def write_all_formats(db, folder: Path, session: Path) -> dict[str, str]:
    """Every file an export writes (html, csv and json with their prediction files)."""
    files: dict[str, str] = {}
    for fmt in ("html", "csv", "json"):
        sub = folder / fmt
        for path in export(db, fmt, sub / f"report.{fmt}",
                           metrics=[Bleu4(), RougeL(), BertScore(download=False)],
                           n_resamples=200):
            files[f"{fmt}/{path.name}"] = _masked(path, session)
    return files


@pytest.fixture
def golden_session(db, settings, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(db, "configured_key", "cd" * 32)  # fixed opaque study ids
    build_review_session(db, settings, tmp_path / "session")
    return db, tmp_path / "session"


def test_a_full_export_equals_the_kept_expectation(golden_session, tmp_path):
    db, session = golden_session
    written = write_all_formats(db, tmp_path / "out", session)
    expected = {str(p.relative_to(GOLDEN)): p.read_text(encoding="utf-8")
                for p in sorted(GOLDEN.rglob("*")) if p.is_file()}
    assert sorted(written) == sorted(expected)
    for name, text in written.items():
        if text != expected[name]:
            diff = "\n".join(list(difflib.unified_diff(
                expected[name].splitlines(), text.splitlines(), "expected", name,
                lineterm=""))[:60])
            pytest.fail(f"{name} differs from tests/golden/export/{name}:\n{diff}")


def _rewrite() -> None:
    """Rebuild the session in a scratch folder and keep its export as the expectation."""
    import os

    from rrg_review.app.settings import Settings

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["RRG_REVIEW_KEY"] = "cd" * 32
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings.from_args(str(Path(tmp) / "golden.sqlite"))
        db = settings.open_database()
        try:
            build_review_session(db, settings, Path(tmp) / "session")
            files = write_all_formats(db, Path(tmp) / "out", Path(tmp) / "session")
        finally:
            db.dispose()
    for name, text in files.items():
        target = GOLDEN / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    print(f"wrote {len(files)} files under {GOLDEN}", file=sys.stderr)


if __name__ == "__main__":
    _rewrite()
