"""The CLI (fast --help, import with exit codes), the demo seed, settings and launch guards."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from rrg_review.app.cli import main
from rrg_review.app.serve import is_loopback
from rrg_review.app.serve import main as launch_main
from rrg_review.app.settings import Settings
from rrg_review.app.setup import prepare, seed_demo
from rrg_review.app.viewer.service import StudyViewer
from rrg_review.db.models import Study
from tests import layouts

pytestmark = pytest.mark.both_databases  # SQLite and a real PostgreSQL server

ROOT = Path(__file__).resolve().parents[1]


def test_help_is_fast_and_loads_no_heavy_library():
    code = ("import sys, rrg_review.app.cli\n"
            "try:\n    rrg_review.app.cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'transformers', 'gradio', 'pydicom', 'sqlalchemy')"
            " if m in sys.modules]\nprint('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True).stdout
    assert "import" in out and "HEAVY []" in out


def test_import_command_reports_counts_and_exit_codes(tmp_path, rg1_small, capsys):
    root = layouts.rexgradient(tmp_path / "rex", rg1_small)
    db = str(tmp_path / "cli.sqlite")
    assert main(["import", str(root), "--db", db]) == 0
    assert "rexgradient: 3 records: 3 added, 0 updated, 0 unchanged, 0 failed (4 images added)" \
        in capsys.readouterr().out
    assert main(["import", str(root), "--db", db, "--format", "rexgradient"]) == 0
    assert "0 added, 0 updated, 3 unchanged, 0 failed (0 images added)" in capsys.readouterr().out
    assert main(["studies", "--db", db]) == 0
    assert "3 studies, 2 patients, 4 images" in capsys.readouterr().out


def test_import_command_fails_clearly_on_bad_input(tmp_path, rg1_small, capsys):
    root = layouts.mimic_cxr(tmp_path / "mimic", rg1_small)
    (root / "files" / "p10" / "p10000764" / "s57375967" / "d4.jpg").write_bytes(b"\xff\xd8junk")
    db = str(tmp_path / "cli.sqlite")
    assert main(["import", str(root), "--db", db]) == 1
    captured = capsys.readouterr()
    assert "2 added" in captured.out and "1 failed" in captured.out and "d4.jpg" in captured.err
    (tmp_path / "empty").mkdir()
    assert main(["import", str(tmp_path / "empty"), "--db", db]) == 2
    assert "no known dataset layout" in capsys.readouterr().err


def test_db_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RRG_REVIEW_DB", str(tmp_path / "env.sqlite"))
    settings = Settings.from_args()
    assert settings.db_url.endswith("env.sqlite")
    assert settings.data_dir == tmp_path / "env-data"
    assert Settings.from_args("postgresql://u@h/db", "/srv/x").db_url == "postgresql://u@h/db"


def test_demo_seed_is_complete_and_runs_once(settings):
    db = prepare(settings)
    with db.read() as s:
        studies = s.scalars(select(Study).order_by(Study.study_key)).all()
        assert [st.study_key for st in studies] == ["DEMO-0001", "DEMO-0002", "DEMO-0003",
                                                    "DEMO-0004"]
    assert seed_demo(db, settings) is None  # not twice
    viewer = StudyViewer(db, settings.blobs)
    current = next(r for r in viewer.worklist() if r.study_key == "DEMO-0002")
    view = viewer.open(current.study_id)
    assert len(view.prior_ids) == 1 and view.reference.impression.startswith("Stable")
    assert view.images[0].display.shape == (1955, 1841)
    png = next(r for r in viewer.worklist() if r.study_key == "DEMO-0004")
    assert viewer.open(png.study_id).images[0].display.dtype.name == "uint8"
    db.dispose()


def test_launch_refuses_non_loopback_hosts_without_readers(capsys, tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    db = str(tmp_path / "x.sqlite")
    assert launch_main(["--host", "0.0.0.0", "--insecure-http", "--db", db, "--no-predraft"]) == 2
    assert "without reader accounts" in capsys.readouterr().err
    assert launch_main(["--login", "--db", db]) == 2


def test_serve_is_a_command_whose_help_names_it(capsys):
    """`rrg-review serve --help` is serve's own help (what `make run` and launch.py start)."""
    with pytest.raises(SystemExit) as done:
        main(["serve", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: rrg-review serve ") and "--read-only" in out
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "serve" in capsys.readouterr().out


def test_imported_studies_join_existing_worklists_unless_asked_not_to(tmp_path, rg1_small,
                                                                      capsys):
    """A dataset imported after the readers exist reaches their worklists (a new-user trial
    imported two studies and never saw them); `--no-worklists` leaves every list as it is. A
    reader with an empty list (`--empty`) is left alone: the first page load fills it."""
    from sqlalchemy import func, select

    from rrg_review.db.models import Reader, WorklistItem

    db = str(tmp_path / "lists.sqlite")
    assert main(["import", str(layouts.rexgradient(tmp_path / "rex", rg1_small)), "--db",
                 db]) == 0
    assert "worklists:" not in capsys.readouterr().out  # no reader yet
    for name, extra in (("ana", []), ("ben", ["--empty"])):
        done = subprocess.run([sys.executable, "-m", "rrg_review.app.cli", "readers", "add", name,
                               "--password-stdin", "--db", db, *extra],
                              input="correct horse battery\n", capture_output=True, text=True,
                              cwd=ROOT, check=False)
        assert done.returncode == 0, done.stderr

    def listed() -> dict[str, int]:
        database = Settings.from_args(db).open_database()
        try:
            with database.read() as s:
                return dict(s.execute(select(Reader.name, func.count(WorklistItem.id))
                                      .outerjoin(WorklistItem, WorklistItem.reader_id == Reader.id)
                                      .group_by(Reader.name)).all())
        finally:
            database.dispose()

    assert listed() == {"ana": 3, "ben": 0}
    assert main(["import", str(layouts.mimic_cxr(tmp_path / "mimic", rg1_small)), "--db",
                 db]) == 0
    assert "worklists: 3 study places added for 1 reader(s)" in capsys.readouterr().out
    assert listed() == {"ana": 6, "ben": 0}
    assert main(["import", str(tmp_path / "mimic"), "--db", db]) == 0  # nothing new
    assert "worklists:" not in capsys.readouterr().out and listed() == {"ana": 6, "ben": 0}
    assert main(["import", str(layouts.iu_archive(tmp_path / "iu", rg1_small)),
                 "--db", db, "--no-worklists"]) == 0
    assert "worklists:" not in capsys.readouterr().out and listed() == {"ana": 6, "ben": 0}
