"""Imports point downward (README, "Design notes"): every import in the source, including the
lazy ones inside functions and those under TYPE_CHECKING, read from the syntax tree."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# lowest first: a package may import only the packages before it
LAYERS = ("core", "studies", "model", "metrics", "db", "app")
# the one narrow way up a layer: metric models find their weights in the Hugging Face cache
# through the same resolver as the drafting models (a leaf module that imports no project code)
NARROW = {("metrics", "model"): {"model.hub"}}


def imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in a file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def sources(package: str) -> list[Path]:
    return [p for p in sorted((ROOT / package).rglob("*.py"))
            if "migrations/versions" not in p.as_posix()]


def wrong_way(package: str) -> list[str]:
    allowed = set(LAYERS[:LAYERS.index(package)])
    found = []
    for path in sources(package):
        for line, module in imports(path):
            top = module.split(".")[0]
            if top not in LAYERS or top == package:
                continue
            narrow = NARROW.get((package, top))
            if narrow is not None and module in narrow:
                continue
            if top not in allowed or narrow is not None:
                found.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return found


@pytest.mark.parametrize("package", LAYERS)
def test_imports_point_downward(package):
    assert wrong_way(package) == []


def test_the_check_finds_an_upward_import(tmp_path, monkeypatch):
    """The test above can fail: a planted upward import is found, with file and line."""
    fake_root = tmp_path / "repo"
    (fake_root / "studies").mkdir(parents=True)
    (fake_root / "studies" / "bad.py").write_text(
        "def f():\n    from app.settings import Settings\n    return Settings\n")
    (fake_root / "metrics").mkdir()
    (fake_root / "metrics" / "m.py").write_text("import model.presets\nfrom model.hub import x\n")
    monkeypatch.setitem(globals(), "ROOT", fake_root)
    assert wrong_way("studies") == ["studies/bad.py:2 imports app.settings"]
    assert wrong_way("metrics") == ["metrics/m.py:1 imports model.presets"]


def test_the_screen_talks_to_services_not_to_the_database():
    """app/ui reads and writes through app/services: no database models or sessions."""
    found = [f"{p.relative_to(ROOT)}:{line} imports {m}"
             for p in sources("app/ui") for line, m in imports(p)
             if m.split(".")[0] in ("db", "sqlalchemy")]
    assert found == []


def test_the_command_line_builds_no_queries():
    """app/cli.py opens the database and calls services; queries live in app/services."""
    cli = ROOT / "app" / "cli.py"
    found = [f"cli.py:{line} imports {m}" for line, m in imports(cli)
             if m in ("sqlalchemy", "sqlalchemy.orm", "db.models")
             or (m.startswith("sqlalchemy") and m != "sqlalchemy.exc")]
    assert found == []
