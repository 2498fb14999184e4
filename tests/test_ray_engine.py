"""`rrg-review draft --engine ray` and `score --engine ray` on Ray clusters (CPU, tiny
encoder-decoder): the same drafts and scores as the local engine, a failing study recorded
while the rest go on, and a run whose driver is SIGKILLed resumes with no duplicate and no gap.

Two kinds of cluster, as users meet them: the one a command starts for itself (the killed
run), and one started beforehand with `ray start --head`, as on a team's GPU node, which a
command joins by `--address` or finds by itself (`ray_head`, one for the module: starting a
cluster costs about 7 CPU-s; `python -m bench.scale`'s smoke run joins it too)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

from rrg_review.app.cli import main as cli
from rrg_review.app.ingest.service import import_records
from rrg_review.app.settings import Settings
from rrg_review.db.models import Draft, Image, Study
from tests.test_drafting_service import _images, record
from tests.tiny_models import tiny_encoder_decoder

pytest.importorskip("ray.data", reason="Ray is the optional [scale] extra")
pytestmark = pytest.mark.slow  # starts a local Ray cluster and model actors
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def presets(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("ray-model")
    tiny = tiny_encoder_decoder(folder / "tiny")
    path = folder / "presets.json"
    path.write_text(json.dumps({"tiny": {
        "backend": "vision-encoder-decoder", "generation": {"max_length": 12},
        "models": {"findings": str(tiny), "impression": str(tiny)}}}))
    return path


@dataclass(frozen=True)
class RayHead:
    address: str
    env: dict[str, str]  # a command's: finds the cluster by itself, and has its token


@pytest.fixture(scope="module")
def ray_head() -> Iterator[RayHead]:
    """A cluster started with `ray start --head` before any command, in a temporary folder of
    its own (RAY_TMPDIR, short: Ray's socket paths live in it): only a command given that
    folder finds it (bench.scale's smoke run is), so the killed run's cluster is started as
    usual. Its workers run at niceness 0, as a cluster started for the suite must
    (Ray's default of 15 starved them beside the other tests). It uses token authentication,
    as `ray start` does wherever ~/.ray/auth_token exists, with a token of its own given in
    the environment (RAY_AUTH_TOKEN: nothing is written to the home folder, and a fresh
    machine, which has no token file, tests the same); its commands say RAY_AUTH_MODE=token,
    as Ray's documentation has clients do. Stopped by its own processes, not `ray stop`
    (which stops every cluster of the machine)."""
    import secrets

    folder = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = {**os.environ, "RAY_TMPDIR": folder, "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    ray = str(Path(sys.executable).with_name("ray"))
    started = subprocess.run(
        [ray, "start", "--head", "--port=0", "--num-cpus=2", "--include-dashboard=false",
         "--disable-usage-stats", '--system-config={"worker_niceness": 0}'],
        env=env, capture_output=True, text=True, timeout=180, check=False)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        address = (Path(folder) / "ray" / "ray_current_cluster").read_text().strip()
        yield RayHead(address=address, env=env)
    finally:
        _stop_cluster(folder)


def _stop_cluster(folder: str) -> None:
    """Stop the cluster whose daemons name `folder` on their command lines, with everything
    they started, and remove the folder."""
    import shutil

    table = _processes()
    named = {pid for pid, (_, cmdline) in table.items() if folder.encode() in cmdline}
    for pid in named | _descendants(named, table):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def _processes() -> dict[int, tuple[int, bytes]]:
    """Every process: its parent and its command line (NUL-separated)."""
    table: dict[int, tuple[int, bytes]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                table[int(entry.name)] = (parent, (entry / "cmdline").read_bytes())
            except (OSError, IndexError, ValueError):
                continue  # ended meanwhile
    return table


def _descendants(roots: set[int], table: dict[int, tuple[int, bytes]]) -> set[int]:
    under, found = set(roots), True
    while found:
        found = False
        for pid, (parent, _) in table.items():
            if parent in under and pid not in under:
                under.add(pid)
                found = True
    return under - roots


def test_no_more_actors_than_batches():
    """An actor given no block still loads its model replica: a 4-study run with --workers 2
    and batches of 8 started two actors, one of which never drafted."""
    from rrg_review.app.drafting.ray_engine import RayConfig, blocks_and_actors

    assert blocks_and_actors(4, RayConfig(workers=2, batch_size=8)) == (1, 1)
    assert blocks_and_actors(9, RayConfig(workers=2, batch_size=8)) == (2, 2)
    assert blocks_and_actors(40, RayConfig(workers=8, batch_size=8)) == (5, 5)
    assert blocks_and_actors(64, RayConfig(workers=2, batch_size=8)) == (8, 2)
    assert blocks_and_actors(1, RayConfig(workers=1, batch_size=1)) == (1, 1)


def filled_db(folder: Path, rg1_small, n: int = 8, broken: int | None = None) -> Settings:
    settings = Settings.from_args(str(folder / "db.sqlite"))
    db = settings.open_database()
    img = list(_images(rg1_small).values())
    records = [record(f"S{i}", f"P{i}", img[i % len(img)], f"findings {i}", f"impression {i}",
                      day=1 + i % 28) for i in range(n)]
    assert import_records(db, records, blobs=settings.blobs, fmt="test").added == n
    if broken is not None:  # one study's image file disappears
        with db.read() as session:
            image = session.scalars(select(Image).join(Study).where(
                Study.study_key == f"S{broken}")).one()
        settings.blobs.path(image.uri).unlink()
    db.dispose()
    return settings


def drafts_by_key(settings: Settings) -> dict[tuple[str, str], list[tuple]]:
    db = settings.open_database()
    out: dict[tuple[str, str], list[tuple]] = {}
    with db.read() as session:
        for key, d in session.execute(select(Study.study_key, Draft).join(Study)):
            out.setdefault((key, d.section), []).append(
                (d.text, d.error is not None, d.model_id, d.generation.get("max_length")))
    db.dispose()
    return out


def cli_args(settings: Settings, presets: Path) -> list[str]:
    return ["draft", "--model", "tiny", "--presets", str(presets), "--device", "cpu",
            "--db", settings.db_url, "--data-dir", str(settings.data_dir)]


def run_cli(args: list[str], timeout: float = 400,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "rrg_review.app.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT, check=False)


def ray_worker_niceness(driver: int) -> dict[str, int]:
    """The niceness of each Ray worker process started under `driver` (a CLI run and the local
    cluster it started), by the process's title ("ray::MapWorker(...)", "ray::IDLE")."""
    table = _processes()
    niceness: dict[str, int] = {}
    for pid in _descendants({driver}, table):
        try:
            title = table[pid][1].split(b"\0")[0].decode()
            if title.startswith("ray::"):
                niceness[f"{title} {pid}"] = os.getpriority(os.PRIO_PROCESS, pid)
        except (OSError, UnicodeDecodeError):
            continue
    return niceness


def test_a_killed_ray_run_resumes_with_no_duplicate_and_no_gap(tmp_path, rg1_small, presets,
                                                               request):
    """Killed on the cluster the command started for itself, resumed on a running one. The
    module's first Ray test, and `ray_head` is started only for the resumed run: a local
    start beside two busy processes and an idle `ray start` cluster's dozen daemons missed
    Ray's fixed 30 s for a raylet to come up."""
    # Enough studies that a fast machine cannot draft them all between two polls (CI drafted
    # 10 studies within one 0.5 s poll once the actor was up, so the kill came too late; the
    # poll is 0.05 s now, and the kill comes once two studies are stored: 24 leave 20 or more).
    n = 24
    settings = filled_db(tmp_path, rg1_small, n=n)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1"}
    args = [*cli_args(settings, presets), "--engine", "ray", "--workers", "1",
            "--batch-size", "1"]
    proc = subprocess.Popen([sys.executable, "-m", "rrg_review.app.cli", *args], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # its own group: Ray's daemons too
    db = settings.open_database()
    try:
        deadline = time.monotonic() + 400
        while True:
            with db.read() as session:
                stored = session.scalar(select(func.count(Draft.id)))
            if stored >= 4:  # two studies drafted: the run is under way
                niceness = ray_worker_niceness(proc.pid)
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no draft stored in time"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and what it started, mid-run
        proc.wait()
    with db.read() as session:
        before = session.scalar(select(func.count(Draft.id)))
    assert before < 2 * n  # it was stopped part way
    # Ray's own default ran its workers at niceness 15: beside two busy processes a 4-study
    # draft took 165 s instead of 5 (bench.scale); they run at the command's own priority
    assert any(title.startswith("ray::MapWorker") for title in niceness), niceness
    assert set(niceness.values()) == {os.getpriority(os.PRIO_PROCESS, 0)}, niceness
    # the resumed run drafts the rest in batches of 8 (what is resumed does not depend on the
    # batch size; one study a batch, the ~38 left took half a minute of the suite's time)
    ray_head = request.getfixturevalue("ray_head")
    done = run_cli([*args[:-1], "8", "--address", ray_head.address], env=ray_head.env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "already drafted" in done.stdout
    drafts = drafts_by_key(settings)
    assert len(drafts) == 2 * n and all(len(v) == 1 for v in drafts.values())  # no dup, no gap
    db.dispose()


def test_bench_scale_runs_on_a_running_cluster(tmp_path, ray_head):
    """`python -m bench.scale`, its quick check (tests/test_bench_smoke.py), joining the
    module's cluster as `ray start`'s cluster on a GPU node is joined."""
    from tests.test_bench_smoke import check_bench_script

    check_bench_script("scale", tmp_path, ray_head.env)


def test_ray_drafts_equal_local_drafts_and_a_failing_study_is_recorded(
        tmp_path, rg1_small, presets, capsys, ray_head):
    """On a cluster given by `--address`."""
    local = filled_db(tmp_path / "local", rg1_small, broken=3)
    on_ray = filled_db(tmp_path / "ray", rg1_small, broken=3)
    assert cli([*cli_args(local, presets), "--batch-size", "3"]) == 1
    capsys.readouterr()
    done = run_cli([*cli_args(on_ray, presets), "--engine", "ray", "--workers", "2",
                    "--batch-size", "2", "--address", ray_head.address], env=ray_head.env)
    assert done.returncode == 1, done.stderr[-3000:]  # one study failed, the rest drafted
    # S3's image is gone; S7 has the same image bytes (stored once, content-addressed)
    assert "tiny: 12 sections drafted, 4 failed" in done.stdout
    assert "cannot read file" in done.stderr
    expected, got = drafts_by_key(local), drafts_by_key(on_ray)
    assert got == expected
    assert got[("S3", "findings")][0][1] is True  # the failure is stored with its study
    assert got[("S4", "findings")][0][1] is False
    assert all(len(v) == 1 for v in got.values()) and len(got) == 16


def test_ray_scoring_equals_local_scoring_and_resumes_from_the_cache(tmp_path, ray_head):
    """With no `--address` on a machine where `ray start` runs a cluster: the command joins
    it, as Ray itself does (it stopped with Ray's traceback, "When connecting to an existing
    cluster, _system_config must not be provided", and a second cluster beside the first
    would hand its GPUs out twice)."""
    import random

    random.seed(7)
    words = ("the", "lungs", "are", "clear", "no", "pleural", "effusion", "heart", "size",
             "normal", "mild", "edema")
    refs = [" ".join(random.choices(words, k=random.randint(4, 12))) for _ in range(300)]
    hyps = [" ".join(random.choices(words, k=random.randint(3, 12))) for _ in range(300)]
    for name, texts in (("h", hyps), ("r", refs)):
        (tmp_path / f"{name}.jsonl").write_text("\n".join(
            json.dumps({"id": i, "findings": t}) for i, t in enumerate(texts)))
    base = ["score", "--predictions", str(tmp_path / "h.jsonl"), "--references",
            str(tmp_path / "r.jsonl"), "--metrics", "bleu4,rougeL", "--bootstrap", "0"]
    local = run_cli([*base, "--cache", str(tmp_path / "local.sqlite"),
                     "--out", str(tmp_path / "local.json")])
    assert local.returncode == 0, local.stderr[-2000:]
    ray_args = [*base, "--cache", str(tmp_path / "ray.sqlite"), "--out",
                str(tmp_path / "ray.json"), "--engine", "ray", "--workers", "2",
                "--batch-size", "64"]
    on_ray = run_cli(ray_args, env=ray_head.env)
    assert on_ray.returncode == 0, on_ray.stderr[-2000:]
    assert "Traceback" not in on_ray.stderr, on_ray.stderr[-2000:]
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("local", "ray"))
    assert a["metrics"] == b["metrics"] and a["per_sample"] == b["per_sample"]
    import sqlite3

    def cached() -> int:
        with sqlite3.connect(tmp_path / "ray.sqlite") as conn:
            return conn.execute("SELECT COUNT(*) FROM payload").fetchone()[0]

    before = cached()
    assert before == 2 * len(set(zip(hyps, refs, strict=True)))  # every pair, both metrics
    again = run_cli(ray_args, env=ray_head.env)  # all cached: nothing is computed again
    assert again.returncode == 0 and cached() == before
    assert f"ray: {before} pair values computed" in on_ray.stdout
    assert "ray: 0 pair values computed" in again.stdout


def test_a_cluster_that_cannot_be_joined_or_started_is_one_sentence(monkeypatch):
    """Ray's ConnectionError (a wrong address, or a token-authenticated cluster joined without
    RAY_AUTH_MODE=token: Ray retries for about 20 s first) reaches the user as one sentence
    naming the address and the likely fix, not as a traceback; so does Ray's bare Exception
    when a local cluster's raylet is not up within its 30 s (seen beside busy processes)."""
    from rrg_review.app.drafting import ray_engine
    from rrg_review.app.drafting.ray_engine import RayConfig, RayUnavailable, connect

    def times_out(**options):
        assert options["address"] == "local" and "_system_config" in options
        raise Exception("The current node timed out during startup.")  # (as Ray raises it)

    monkeypatch.setattr(ray_engine, "cluster_set_up_here", lambda: None)
    with pytest.raises(RayUnavailable, match="could not start a local Ray cluster: The current "
                                             "node timed out during startup"):
        connect(SimpleNamespace(is_initialized=lambda: False, init=times_out), RayConfig())

    def refuse(**options):
        raise ConnectionError(f"Failed to connect to Ray cluster at {options['address']}")

    ray = SimpleNamespace(is_initialized=lambda: False, init=refuse)
    with pytest.raises(RayUnavailable, match=r"cannot join the Ray cluster at head:6379: "
                                             r"Failed to connect.*RAY_AUTH_MODE=token"):
        connect(ray, RayConfig(address="head:6379"))
