"""Configuration is chosen once in app.settings (flag > environment > default) and passed down:
the packages below never read these variables themselves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rrg_review.app.cli import main as cli
from rrg_review.app.settings import Settings
from rrg_review.metrics.chexbert import CheXbertF1
from rrg_review.metrics.registry import build
from rrg_review.metrics.worker_client import SPECS, workers_root
from rrg_review.model.presets import load_presets


def _presets(path: Path, name: str) -> str:
    path.write_text(json.dumps({name: {"backend": "chat", "models": {"report": "x/y"},
                                       "prompts": {"report": "{views}"}}}))
    return str(path)


@pytest.mark.parametrize(("field", "flag", "env_name"), [
    ("presets_file", "presets", "RRG_REVIEW_PRESETS"),
    ("chexbert_weights", "chexbert_weights", "RRG_REVIEW_CHEXBERT"),
    ("log_level", "log_level", "RRG_REVIEW_LOG_LEVEL"),
])
def test_the_flag_beats_the_environment_which_beats_the_default(field, flag, env_name):
    default = Settings.from_args(environ={})
    from_env = Settings.from_args(environ={env_name: "from-env"})
    from_flag = Settings.from_args(**{flag: "from-flag"}, environ={env_name: "from-env"})
    assert getattr(default, field) == ("WARNING" if field == "log_level" else None)
    assert getattr(from_env, field).lower() == "from-env"
    assert getattr(from_flag, field).lower() == "from-flag"
    blank = Settings.from_args(environ={env_name: "  "})  # a blank variable is not a value
    assert getattr(blank, field) == getattr(default, field)


def test_metric_workers_folder_flag_env_default(tmp_path):
    assert Settings.from_args(environ={}).metric_workers_dir is None
    assert workers_root(None) == Path.home() / ".cache" / "rrg-review" / "metric-workers"
    env = Settings.from_args(environ={"RRG_REVIEW_METRIC_WORKERS": str(tmp_path / "env")})
    assert env.metric_workers_dir == tmp_path / "env"
    flag = Settings.from_args(metric_workers=str(tmp_path / "flag"),
                              environ={"RRG_REVIEW_METRIC_WORKERS": str(tmp_path / "env")})
    (worker,) = build(["ratescore"], flag.metric_config(download=False))
    assert worker.folder == tmp_path / "flag" / "ratescore"
    assert worker.name in SPECS


def test_worker_python_flag_beats_the_presets_variable():
    preset = load_presets()["maira-2"]  # a worker preset: its interpreter is in a variable
    var = preset.options["python_env"]
    settings = Settings.from_args(environ={var: "/env/python"})
    assert settings.worker_python(preset) == "/env/python"
    assert settings.worker_python(preset, "/flag/python") == "/flag/python"
    assert Settings.from_args(environ={}).worker_python(preset) is None


def test_the_packages_below_do_not_read_the_environment(monkeypatch, tmp_path):
    """With the variables set, a package used directly sees none of them: only settings do."""
    monkeypatch.setenv("RRG_REVIEW_PRESETS", _presets(tmp_path / "p.json", "from-env"))
    monkeypatch.setenv("RRG_REVIEW_CHEXBERT", str(tmp_path / "chexbert.pth"))
    assert "from-env" not in load_presets()
    assert CheXbertF1().weights is None
    settings = Settings.from_args()
    assert "from-env" in load_presets(settings.presets_file)
    (chexbert,) = build(["chexbert"], settings.metric_config(download=False))
    assert chexbert.weights == str(tmp_path / "chexbert.pth")


def test_cli_models_reads_presets_flag_over_environment(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RRG_REVIEW_PRESETS", _presets(tmp_path / "env.json", "from-env"))
    assert cli(["models"]) == 0
    assert "from-env" in capsys.readouterr().out
    flag = _presets(tmp_path / "flag.json", "from-flag")
    assert cli(["models", "--presets", flag]) == 0
    out = capsys.readouterr().out
    assert "from-flag" in out and "from-env" not in out


def test_import_workers_from_the_environment_and_a_bad_value_is_one_sentence(tmp_path, capsys):
    """The test suite checks imported images in-process (RRG_REVIEW_IMPORT_WORKERS=1, set in
    conftest); unset, an import uses one process per core."""
    assert Settings.from_args(environ={}).import_workers is None
    assert Settings.from_args(environ={"RRG_REVIEW_IMPORT_WORKERS": "3"}).import_workers == 3
    for bad in ("0", "-2", "two"):
        with pytest.raises(ValueError, match="RRG_REVIEW_IMPORT_WORKERS must be a whole number"):
            Settings.from_args(environ={"RRG_REVIEW_IMPORT_WORKERS": bad})
    (tmp_path / "ds").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RRG_REVIEW_IMPORT_WORKERS", "none")
        assert cli(["import", str(tmp_path / "ds"), "--db", str(tmp_path / "x.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: RRG_REVIEW_IMPORT_WORKERS must be") and "Traceback" not in err


def test_password_cost_from_the_environment_and_a_bad_value_is_one_sentence(tmp_path, capsys):
    """RRG_REVIEW_PASSWORD_COST: scrypt's N for new hashes (default 2^17, OWASP's minimum), a
    power of two from 2^14 to 2^20; anything else stops a command with one sentence naming
    the variable, and the workstation refuses to start, before anything is opened."""
    from rrg_review.app.serve import main as serve

    assert Settings.from_args(environ={}).password_cost == 2**17
    assert Settings.from_args(environ={"RRG_REVIEW_PASSWORD_COST": "16384"}).password_cost == 2**14
    for bad in ("1024", "100000", "2097152", "0", "-16384", "fast"):
        with pytest.raises(ValueError, match="RRG_REVIEW_PASSWORD_COST: the password cost must "
                                             r"be a power of two from 2\^14 \(16384\) to 2\^20"):
            Settings.from_args(environ={"RRG_REVIEW_PASSWORD_COST": bad})
    db = tmp_path / "x.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RRG_REVIEW_PASSWORD_COST", "1000")
        assert cli(["readers", "list", "--db", str(db)]) == 2
        assert serve(["--db", str(db), "--port", "1", "--no-demo"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: RRG_REVIEW_PASSWORD_COST: the password cost must be a power of two "
                   "from 2^14 (16384) to 2^20, not '1000'"] * 2
    assert not db.exists()  # refused before the database was opened
