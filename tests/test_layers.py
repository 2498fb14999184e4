"""The house, read from the syntax tree of every module of `src/rrg_review` (README, "Design
notes"): imports point downward through the layers, no modules import each other in a circle
(lazy imports inside functions count: they are how circles hide), no function of the app is
longer than a screen, and the checks can fail."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "rrg_review"
# lowest first: a layer may import only the layers before it
LAYERS = ("core", "studies", "model", "metrics", "reader_study", "db", "app")
# lines of the longest function app/ may have (its command line excepted, for now): the page's
# one 601-line function with ~35 nested handlers is what this keeps from coming back
LONGEST_FUNCTION = 60
# the one narrow way up a layer: metric models find their weights in the Hugging Face cache
# through the same resolver as the drafting models (a leaf module that imports no project code)
NARROW = {("metrics", "model"): {"rrg_review.model.hub"}}
# above every layer: `python -m rrg_review`, which only calls the command line (as the console
# script does); nothing imports it
ENTRY_POINTS = {"rrg_review.__main__": {"sys", "rrg_review.app.cli", "rrg_review.app.cli.main"}}


def imports(path: Path, module: str) -> Iterator[tuple[int, str]]:
    """(line, absolute module) of every import in a file, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from pkg import module` imports a module too
                yield node.lineno, f"{target}.{alias.name}"


def modules(root: Path) -> dict[str, Path]:
    """Every module of the package under `root` (src/), by dotted name."""
    found = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        if "migrations/versions" in path.as_posix():
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == PACKAGE and parts[1] in LAYERS else None


def wrong_way(root: Path, package: str) -> list[str]:
    allowed = set(LAYERS[:LAYERS.index(package)])
    found = []
    for name, path in modules(root).items():
        if layer(name) != package:
            continue
        for line, target in imports(path, name):
            top = layer(target)
            if top is None or top == package:
                continue
            narrow = NARROW.get((package, top))
            if narrow is not None and any(target == n or target.startswith(n + ".")
                                          for n in narrow):
                continue
            if top not in allowed or narrow is not None:
                found.append(f"{path.relative_to(root)}:{line} imports {target}")
    return sorted(set(found))


def graph(root: Path) -> dict[str, set[str]]:
    """module -> the package's modules it imports (a package's __init__ is not an edge:
    importing `a.b` runs `a/__init__` but `a/__init__` here imports nothing of ours)."""
    known = modules(root)
    edges: dict[str, set[str]] = {}
    for name, path in known.items():
        edges[name] = {t for _, t in imports(path, name) if t in known and t != name
                       and known[t].name != "__init__.py"}
    return edges


def circles(root: Path) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm)."""
    edges = graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def long_functions(root: Path, limit: int = LONGEST_FUNCTION) -> list[str]:
    """Functions of app/ (the command line included) longer than `limit` lines, each counted
    whole with the functions nested in it (nesting is how a long function hides)."""
    found = []
    for name, path in modules(root).items():
        parts = name.split(".")
        if parts[:2] != [PACKAGE, "app"] or len(parts) < 3:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} "
                                 f"({lines} lines)")
    return sorted(found)


@pytest.mark.parametrize("package", LAYERS)
def test_imports_point_downward(package):
    assert wrong_way(ROOT / "src", package) == []


# circles being taken apart (#23): none is left, and none may be added
KNOWN_CIRCLES: list[list[str]] = []


def test_no_import_circles():
    assert [c for c in circles(ROOT / "src") if c not in KNOWN_CIRCLES] == []


def test_no_function_in_the_app_is_longer_than_a_screen():
    assert long_functions(ROOT / "src") == []


def test_the_length_check_finds_a_long_function_even_nested(tmp_path):
    pkg = tmp_path / PACKAGE
    for sub in ("app", "app/cli", "db"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    body = "".join(f"    x{i} = {i}\n" for i in range(58))
    (pkg / "app" / "ok.py").write_text(f"def fits():\n{body}    return 0\n")  # 60 lines
    (pkg / "app" / "page.py").write_text(
        f"def outer():\n    def handler():\n    {body.replace(chr(10), chr(10) + '    ')}"
        "    return 1\n    return handler\n")
    (pkg / "app" / "cli" / "main.py").write_text(f"def cli():\n{body}{body}")
    (pkg / "db" / "store.py").write_text(f"def query():\n{body}{body}")
    assert long_functions(tmp_path) == ["rrg_review/app/cli/main.py:1 cli (117 lines)",
                                        "rrg_review/app/page.py:1 outer (62 lines)"]


def test_every_module_is_in_a_layer():
    """Nothing hides beside the layers (a new top-level module would escape the checks)."""
    found = modules(ROOT / "src")
    stray = [m for m in found if m != PACKAGE and layer(m) is None and m not in ENTRY_POINTS]
    assert stray == []
    for entry, allowed in ENTRY_POINTS.items():  # an entry point only starts the command line
        assert {t for _, t in imports(found[entry], entry)} <= allowed, entry


def test_the_checks_find_an_upward_import_and_a_circle(tmp_path):
    """The tests above can fail: a planted upward import and a planted circle are found."""
    pkg = tmp_path / PACKAGE
    for sub in ("studies", "metrics", "model", "app"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "studies" / "bad.py").write_text(
        "def f():\n    from rrg_review.app.settings import Settings\n    return Settings\n")
    (pkg / "metrics" / "m.py").write_text(
        "import rrg_review.model.presets\nfrom rrg_review.model.hub import x\n")
    (pkg / "app" / "a.py").write_text("from . import b\n")
    (pkg / "app" / "b.py").write_text("def g():\n    from rrg_review.app.a import f\n")
    assert wrong_way(tmp_path, "studies") == [
        "rrg_review/studies/bad.py:2 imports rrg_review.app.settings",
        "rrg_review/studies/bad.py:2 imports rrg_review.app.settings.Settings"]
    assert wrong_way(tmp_path, "metrics") == ["rrg_review/metrics/m.py:1 imports "
                                              "rrg_review.model.presets"]
    assert circles(tmp_path) == [["rrg_review.app.a", "rrg_review.app.b"]]


def test_the_screen_talks_to_services_not_to_the_database():
    """The page's panels read and write through services: no database models or sessions."""
    found = [f"{p.relative_to(ROOT)}:{line} imports {m}"
             for name, p in modules(ROOT / "src").items()
             if name.startswith(f"{PACKAGE}.app.") and (p.parent.name == "ui"
                                                         or p.stem in ("panel", "page", "desk"))
             for line, m in imports(p, name)
             if m.startswith((f"{PACKAGE}.db", "sqlalchemy"))]
    assert found == []


def test_the_command_line_builds_no_queries():
    """The CLI opens the database and calls services; queries live in the services."""
    found = [f"{p.relative_to(ROOT)}:{line} imports {m}"
             for name, p in modules(ROOT / "src").items()
             if name.startswith(f"{PACKAGE}.app.cli")
             for line, m in imports(p, name)
             if m in ("sqlalchemy", "sqlalchemy.orm") or m.startswith(f"{PACKAGE}.db.models")
             or (m.startswith("sqlalchemy") and not m.startswith("sqlalchemy.exc"))]
    assert found == []
