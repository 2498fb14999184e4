"""The wheel built from the repository, installed alone into a fresh virtualenv, is the
product: `rrg-review --help` runs and `rrg-review serve` serves the workstation.

The wheel is built from a copy of the repository's package sources (`pip wheel --no-deps
--no-build-isolation`, so the build writes nothing into the checkout). The fresh virtualenv gets
only the wheel (`--no-deps`); its dependencies come from the project's own virtualenv through
a plain path line in a .pth file. A plain path line puts that site-packages on sys.path without
running its .pth files, so the editable install's finder (which would import the checkout's
`src/`) stays out: what runs is the wheel's copy, which the test checks.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from bench.processes import stop_process

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
# besides the Python modules, what the installed program reads from its own package
DATA_FILES = ("rrg_review/py.typed", "rrg_review/app/static/page.js",
              "rrg_review/app/static/viewer.js", "rrg_review/app/static/marks.js",
              "rrg_review/app/static/page.css", "rrg_review/db/migrations/env.py",
              "rrg_review/db/migrations/script.py.mako", "rrg_review/model/presets.json",
              "rrg_review/model/prompts.json", "rrg_review/studies/demo/demo_studies.json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH (the tests run with the checkout's src/ on it), offline."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    return {**env, "HF_HUB_OFFLINE": "1", **extra}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source")
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "README.md", source)
    shutil.copytree(ROOT / "src" / "rrg_review", source / "src" / "rrg_review",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "--disable-pip-version-check", "-q",
                            "-w", str(out), str(source)],
                           capture_output=True, text=True, env=clean_env(), timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (found,) = out.glob("rrg_review-*.whl")
    return found


def test_the_wheel_holds_one_top_level_package_with_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"rrg_review"}
    missing = [f for f in DATA_FILES if f not in names]
    assert missing == []
    migrations = [n for n in names if n.startswith("rrg_review/db/migrations/versions/")]
    shipped = sorted(p.name for p in (ROOT / "src/rrg_review/db/migrations/versions").glob("*.py"))
    assert sorted(Path(n).name for n in migrations) == shipped
    # every file of the package in the checkout (not a cache) is in the wheel
    package = ROOT / "src" / "rrg_review"
    files = sorted(f"rrg_review/{p.relative_to(package).as_posix()}" for p in package.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    assert [f for f in files if f not in names] == []


def test_a_fresh_venv_with_only_the_wheel_serves_the_workstation(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=300)
    python = venv / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--disable-pip-version-check", "-q", str(wheel)],
        capture_output=True, text=True, env=clean_env(), timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True,
                          env=clean_env()).stdout.strip()
    # the project's dependencies, as a plain path line (no editable finder runs from it)
    (Path(site) / "project_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = clean_env()

    helped = subprocess.run([str(venv / "bin" / "rrg-review"), "--help"], cwd=outside, env=env,
                            capture_output=True, text=True, timeout=300)
    assert helped.returncode == 0, helped.stderr[-3000:]
    assert "serve" in helped.stdout and "import" in helped.stdout
    where = subprocess.run([str(python), "-c", "import rrg_review; print(rrg_review.__file__)"],
                           cwd=outside, env=env, capture_output=True, text=True, timeout=120)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout + where.stderr

    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(venv / "bin" / "rrg-review"), "serve", "--no-demo", "--no-predraft",
             "--port", str(port), "--db", str(tmp_path / "x.sqlite")],
            cwd=outside, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        page = _wait_for_page(f"http://127.0.0.1:{port}/", proc, log)
        assert page.status_code == 200 and "<html" in page.text.lower()
        script = httpx.get(f"http://127.0.0.1:{port}/config", timeout=30)
        assert script.status_code == 200  # Gradio's page config: the workstation is mounted
    finally:
        stop_process(proc)
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    assert str(ROOT / "src") not in text  # nothing ran from the checkout


def _wait_for_page(url: str, proc: subprocess.Popen, log: Path) -> httpx.Response:
    deadline = time.monotonic() + 240
    while True:
        assert proc.poll() is None, f"rrg-review serve exited:\n{log.read_text()[-3000:]}"
        try:
            return httpx.get(url, timeout=5)
        except httpx.HTTPError:
            assert time.monotonic() < deadline, f"no page in 240 s:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
