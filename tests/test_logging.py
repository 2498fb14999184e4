"""Logging and failures that are told, not swallowed: the one logging set-up, retrieval saying
why nothing could be retrieved, pre-drafting errors the reader sees, and metric failures that
are retried and remembered per call only."""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Sequence

import pytest

from rrg_review.app.cli import main as cli
from rrg_review.app.drafting.service import DraftingService, PreDrafter
from rrg_review.app.logs import configure_logging
from rrg_review.app.settings import Settings
from rrg_review.metrics.base import Payload
from rrg_review.metrics.bleu import Bleu4
from rrg_review.metrics.scoring import score
from rrg_review.model.backends.retrieval import RetrievalDrafter, ThumbnailFeatures
from rrg_review.model.presets import load_presets
from tests.test_drafting_service import filled  # noqa: F401 - the shared fixture

HYPS = ["no acute cardiopulmonary process", "small left pleural effusion"]
REFS = ["no acute cardiopulmonary abnormality", "small left pleural effusion"]


@pytest.fixture
def restore_logging():
    """configure_logging changes process-wide state: put it back for the other tests."""
    root = logging.getLogger()
    before = (list(root.handlers), root.level,
              {n: logging.getLogger(n).level for n in ("app", "db", "studies", "model",
                                                        "metrics")})
    yield
    for h in list(root.handlers):
        if h not in before[0]:
            root.removeHandler(h)
            h.close()
    root.setLevel(before[1])
    logging.captureWarnings(False)
    for name, level in before[2].items():
        logging.getLogger(name).setLevel(level)


def test_configure_logging_writes_our_records_to_a_private_file_once(tmp_path, restore_logging):
    log_file = tmp_path / "reviews.log"
    configure_logging("debug", log_file)
    configure_logging("INFO", log_file)  # a second set-up replaces the first, never doubles
    logging.getLogger("rrg_review.app.review.example").info("a study was drafted")
    logging.getLogger("rrg_review.app.review.example").debug("below the level")
    logging.getLogger("some.library").info("library chatter")
    for h in logging.getLogger().handlers:
        h.flush()
    text = log_file.read_text()
    assert text.count("a study was drafted") == 1
    assert "INFO rrg_review.app.review.example: a study was drafted" in text
    assert "below the level" not in text and "library chatter" not in text
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        configure_logging("loud")


def test_a_library_record_is_one_line_without_its_traceback_and_ours_are_unchanged(
        tmp_path, restore_logging):
    log_file = tmp_path / "x.log"
    configure_logging("INFO", log_file)
    try:
        raise RuntimeError("Error decoding the J2K data: failed to read the header")
    except RuntimeError:
        logging.getLogger("pydicom.pixels.decoders.base").error(
            "Error decoding the J2K data:\nfailed to read the header", exc_info=True)
        logging.getLogger("some.library").error("could not read", exc_info=True)
        logging.getLogger("rrg_review.studies.example").warning("our own", exc_info=True)
    for h in logging.getLogger().handlers:
        h.flush()
    lines = log_file.read_text().splitlines()
    library = [ln for ln in lines if "pydicom" in ln or "some.library" in ln]
    assert library == [
        library[0][:23] + " WARNING pydicom.pixels.decoders.base: Error decoding the J2K data: "
        "failed to read the header",
        library[1][:23] + " WARNING some.library: could not read (RuntimeError: Error decoding "
        "the J2K data: failed to read the header)"]
    # ours: as logged, traceback included (it is how we debug our own code)
    assert "WARNING rrg_review.studies.example: our own" in lines[2]
    assert lines[3] == "Traceback (most recent call last):"


def test_importing_pydicoms_test_files_prints_no_traceback(tmp_path):
    """pydicom logs each pixel-decoding failure at ERROR with exc_info; we report each failed
    study as one sentence, and the library's records as one line each."""
    import subprocess
    import sys
    from pathlib import Path

    import pydicom.data

    root = Path(__file__).resolve().parents[1]
    files = Path(pydicom.data.__file__).parent / "test_files"  # shipped with pydicom
    res = subprocess.run(
        [sys.executable, "-m", "rrg_review.app.cli", "import", str(files), "--allow-modality",
         "ANY", "--workers", "1", "--db", str(tmp_path / "t.sqlite")],
        capture_output=True, text=True, timeout=600, cwd=root,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root / "src")})
    said = res.stdout + res.stderr
    assert res.returncode == 1, said  # some studies failed, and say so
    assert "Traceback" not in said
    assert " failed (" in res.stdout and "  failed: " in res.stderr
    assert "Error decoding the J2K data" in said  # the library's words, on one line
    assert all(not ln.startswith((" File ", "    ")) for ln in res.stderr.splitlines())


def test_an_unwritable_log_file_is_said_and_the_program_goes_on(tmp_path, restore_logging,
                                                                capsys):
    assert configure_logging("INFO", tmp_path / "missing-folder" / "x.log") is None
    assert "cannot write the log file" in capsys.readouterr().err


def test_the_log_file_sits_beside_the_database(tmp_path):
    settings = Settings.from_args(str(tmp_path / "reviews.sqlite"))
    assert settings.log_file() == tmp_path / "reviews.log"


def test_the_workstation_logs_beside_its_database(tmp_path, restore_logging, capsys):
    from rrg_review.app.serve import main as launch_main

    db = tmp_path / "reviews.sqlite"
    # refused for want of reader accounts, after the logging set-up and the database check
    assert launch_main(["--login", "--no-demo", "--db", str(db)]) == 2
    for h in logging.getLogger().handlers:
        h.flush()
    log_file = tmp_path / "reviews.log"
    assert "INFO rrg_review.app.serve: rrg-review starting" in log_file.read_text()
    assert stat.S_IMODE(log_file.stat().st_mode) == 0o600
    assert logging.getLogger("rrg_review").level == logging.INFO  # the workstation's default


def test_cli_log_level_flag_beats_the_environment(tmp_path, monkeypatch, restore_logging,
                                                  capsys):
    monkeypatch.setenv("RRG_REVIEW_LOG_LEVEL", "ERROR")
    db = str(tmp_path / "x.sqlite")
    from rrg_review.db.engine import open_database

    open_database(db).dispose()  # (`studies` reads a database: it makes none)
    assert cli(["studies", "--db", db]) == 0
    assert logging.getLogger("rrg_review").level == logging.ERROR
    assert cli(["--log-level", "debug", "studies", "--db", db]) == 0
    assert logging.getLogger("rrg_review.metrics").getEffectiveLevel() == logging.DEBUG


def test_retrieval_says_why_when_every_candidate_image_is_unreadable(filled, settings,  # noqa: F811
                                                                     caplog):
    """A moved image folder is not "no other patient's study": the drafter says that N studies
    were left out, names the first and why, and logs each."""
    db, ids = filled
    service = DraftingService(db, settings)
    inputs = service.inputs(ids[:1])  # the study being read is in memory already
    shutil.move(settings.data_dir / "blobs", settings.data_dir / "moved-away")
    drafter = RetrievalDrafter(load_presets()["retrieval"], service.candidates,
                               ThumbnailFeatures())
    with caplog.at_level(logging.WARNING, logger="model"):
        result = drafter.draft(inputs)[0]
    assert result.text is None
    assert "stored studies were left out because their images could not be read" in result.error
    assert "check that the image folders are where they were imported from" in result.error
    # S1..S4 have references (S1 is the study itself): each one logged
    assert sum("left out of the index" in r.getMessage() for r in caplog.records) == 4
    assert "4 stored studies were left out" in result.error


def test_a_failed_predraft_batch_is_logged_and_shown_until_a_batch_succeeds(
        filled, settings, caplog):  # noqa: F811
    db, ids = filled

    class FailsOnce(DraftingService):
        calls = 0

        def draft(self, *args, **kwargs):
            FailsOnce.calls += 1
            if FailsOnce.calls == 1:
                raise RuntimeError("CUDA out of memory")
            return super().draft(*args, **kwargs)

    service = FailsOnce(db, settings)
    worker = PreDrafter(service, "retrieval", batch_size=1)
    with caplog.at_level(logging.ERROR, logger="app"):
        worker.schedule(ids[:1])
        assert worker.wait_idle(60)
    assert worker.problem == "background drafting failed: RuntimeError: CUDA out of memory"
    assert any("pre-drafting studies" in r.getMessage() and r.exc_info for r in caplog.records)
    worker.schedule(ids[1:2])
    assert worker.wait_idle(60)
    assert worker.problem is None and worker.unavailable is None
    worker.stop()


def test_a_failed_download_keeps_its_reason_and_logs_it(monkeypatch, tmp_path, caplog):
    import huggingface_hub.constants as constants

    from rrg_review.model.hub import ModelUnavailable, fetch

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with caplog.at_level(logging.WARNING, logger="model"), \
            pytest.raises(ModelUnavailable) as caught:
        fetch("nobody/no-such-model", preset="mine")
    cause = caught.value.__cause__
    assert cause is not None
    assert f"the download failed ({type(cause).__name__}: " in str(caught.value)
    assert any(r.exc_info and "nobody/no-such-model" in r.getMessage() for r in caplog.records)


class FlakyBleu(Bleu4):
    """BLEU-4 whose first `failures` computations crash, as a GPU metric out of memory does."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0
        self.closed = 0

    def compute(self, hyps: Sequence[str], refs: Sequence[str]) -> list[Payload]:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("CUDA out of memory")
        return super().compute(hyps, refs)

    def close(self) -> None:
        self.closed += 1


def test_a_metric_that_fails_once_is_retried_and_scores(caplog):
    flaky = FlakyBleu(failures=1)
    with caplog.at_level(logging.WARNING, logger="metrics"):
        report = score(HYPS, REFS, [flaky], n_resamples=0)
    assert report.unavailable == {}
    assert report.values["bleu4"] == score(HYPS, REFS, [Bleu4()], n_resamples=0).values["bleu4"]
    assert flaky.calls == 2 and flaky.closed == 1  # freed before the second attempt
    assert any("attempt 1 of 2" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_metric_failure_is_remembered_for_one_call_only():
    flaky = FlakyBleu(failures=2)
    first = score(HYPS, REFS, [flaky], n_resamples=0)
    assert first.unavailable["bleu4"] == "failed to run: RuntimeError: CUDA out of memory"
    second = score(HYPS, REFS, [flaky], n_resamples=0)  # the next call tries again
    assert second.unavailable == {} and second.values["bleu4"] > 0
    assert flaky.calls == 3
