"""Configuration is chosen once in app/settings.py and passed down: db/ never reads the
environment (the pseudonym key and the busy timeout come as arguments of open_database)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy import text

from rrg_review.app.settings import ENV_BUSY_TIMEOUT, ENV_KEY, Settings
from rrg_review.db.engine import DEFAULT_BUSY_TIMEOUT_S, open_database
from rrg_review.db.store import pseudonym

DB_PACKAGE = Path(__file__).resolve().parents[1] / "src" / "rrg_review" / "db"
_ENVIRONMENT = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def environment_reads(source: str) -> list[int]:
    """Lines of `source` that touch the process environment: os.environ / os.getenv (however
    os is named) or a name imported from os that does."""
    tree = ast.parse(source)
    os_names = {"os"}
    from_os: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            os_names |= {a.asname or a.name for a in node.names if a.name == "os"}
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            from_os |= {a.asname or a.name for a in node.names if a.name in _ENVIRONMENT}
    def reads(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return (node.attr in _ENVIRONMENT and isinstance(node.value, ast.Name)
                    and node.value.id in os_names)
        if isinstance(node, ast.ImportFrom):
            return node.module == "os" and any(a.name in _ENVIRONMENT for a in node.names)
        return isinstance(node, ast.Name) and node.id in from_os

    lines = [node.lineno for node in ast.walk(tree) if reads(node)]  # type: ignore[attr-defined]
    return sorted(lines)


def test_the_check_finds_every_spelling_of_an_environment_read():
    found = environment_reads(
        "import os\nimport os as o\nfrom os import getenv as g\nos.environ.get('A')\n"
        "o.getenv('B')\ng('C')\nos.path.join('x')\n")
    assert found == [3, 4, 5, 6]


def test_nothing_in_db_reads_the_environment():
    files = sorted(DB_PACKAGE.rglob("*.py"))
    assert len(files) > 5
    offenders = {str(f.relative_to(DB_PACKAGE)): lines for f in files
                 if (lines := environment_reads(f.read_text(encoding="utf-8")))}
    assert offenders == {}, f"db/ reads the environment; choose it in app/settings.py: " \
                            f"{offenders}"


def test_key_and_busy_timeout_are_flag_then_environment_then_default(tmp_path):
    path = str(tmp_path / "c.sqlite")
    default = Settings.from_args(path, environ={})
    assert default.pseudonym_key is None and default.busy_timeout_s == DEFAULT_BUSY_TIMEOUT_S
    env = {ENV_KEY: "ab" * 32, ENV_BUSY_TIMEOUT: "2.5"}
    from_env = Settings.from_args(path, environ=env)
    assert from_env.pseudonym_key == "ab" * 32 and from_env.busy_timeout_s == 2.5
    flagged = Settings.from_args(path, key="cd" * 32, busy_timeout="0.5", environ=env)
    assert flagged.pseudonym_key == "cd" * 32 and flagged.busy_timeout_s == 0.5
    for bad in ("soon", "nan", "inf", ""):
        assert Settings.from_args(path, environ={ENV_BUSY_TIMEOUT: bad}).busy_timeout_s == \
            DEFAULT_BUSY_TIMEOUT_S
    assert Settings.from_args(path, environ={ENV_BUSY_TIMEOUT: "-3"}).busy_timeout_s == 0


def test_the_settings_values_reach_the_database(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_KEY, "ef" * 32)  # read by the settings, never by db/ itself
    monkeypatch.setenv(ENV_BUSY_TIMEOUT, "1.5")
    db = Settings.from_args(str(tmp_path / "s.sqlite")).open_database()
    try:
        assert db.configured_key == "ef" * 32 and db.busy_timeout_s == 1.5
        with db.engine.connect() as conn:
            assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 1500
        with db.write() as s:
            assert pseudonym(s, "MRN-1") == pseudonym(s, "MRN-1")
        assert db._key == bytes.fromhex("ef" * 32)
        assert not (tmp_path / "s.sqlite.key").exists()  # the given key, no key file made
    finally:
        db.dispose()
    # open_database itself ignores the environment: no key given, the key file is used
    plain = open_database(tmp_path / "p.sqlite")
    try:
        assert plain.configured_key is None and plain.busy_timeout_s == DEFAULT_BUSY_TIMEOUT_S
    finally:
        plain.dispose()


@pytest.mark.parametrize("value", ["not hex", "abc"])
def test_a_bad_configured_key_is_one_sentence(tmp_path, value):
    from rrg_review.db.store import PseudonymKeyError

    db = open_database(tmp_path / "k.sqlite", key=value)
    try:
        with pytest.raises(PseudonymKeyError), db.write() as s:
            pseudonym(s, "MRN-1")
    finally:
        db.dispose()
