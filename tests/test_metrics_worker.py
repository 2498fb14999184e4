"""The metric worker: a real virtualenv created by the test, a real subprocess speaking the JSON
lines protocol, a stand-in metric; what a missing package, a CPU-only GREEN, a killed worker and a
bad request do."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rrg_review.app.cli import main as cli
from rrg_review.metrics.cache import FileCache
from rrg_review.metrics.scoring import score
from rrg_review.metrics.worker_client import SPECS, STAMP, WorkerMetric, venv_python


def jaccard(a: str, b: str) -> float:
    x, y = set(a.lower().split()), set(b.lower().split())
    return len(x & y) / len(x | y) if x | y else 1.0


@pytest.fixture(scope="module")
def worker_env(tmp_path_factory) -> Path:
    """`rrg-review metrics setup-worker selftest` into a fresh folder: a separate virtualenv
    (the stand-in needs no package, so no registry)."""
    folder = tmp_path_factory.mktemp("workers") / "selftest"
    assert cli(["metrics", "setup-worker", "selftest", "--dir", str(folder)]) == 0
    return folder


def test_setup_worker_creates_a_separate_environment_and_round_trips(worker_env, capsys):
    assert venv_python(worker_env).is_file() and (worker_env / "pyvenv.cfg").is_file()
    stamp = json.loads((worker_env / STAMP).read_text())
    assert stamp["metric"] == "selftest" and stamp["python"]
    metric = WorkerMetric(SPECS["selftest"], worker_env)
    try:
        ready = metric._start()
        assert ready["ready"] and Path(ready["prefix"]).resolve() == worker_env.resolve()
        assert Path(ready["prefix"]).resolve() != Path(sys.prefix).resolve()
    finally:
        metric.close()


def test_worker_metric_scores_caches_and_recovers_from_a_killed_worker(worker_env, tmp_path):
    hyps = ["lungs are clear", "small left effusion", "", "Épanchement ✓ pleural"]
    refs = ["the lungs are clear", "no effusion", "", "pleural ✓"]
    metric = WorkerMetric(SPECS["selftest"], worker_env)
    cache = FileCache(tmp_path / "c.sqlite")
    try:
        report = score(hyps, refs, [metric], cache, n_resamples=0)
        assert report.per_sample["selftest"] == pytest.approx(
            [jaccard(h, r) for h, r in zip(hyps, refs, strict=True)])
        assert report.meta["selftest"]["version"].startswith("worker-selftest-")
        process = metric._proc
        process.kill()  # a worker killed between calls: the next call starts a new one
        process.wait()
        again = metric.compute(["a b"], ["b c"])
        assert again == [{"selftest": pytest.approx(1 / 3)}]
        assert metric._proc is not process
    finally:
        metric.close()
    assert metric._proc is None


def test_a_worker_whose_package_is_missing_or_needs_a_gpu_is_unavailable(worker_env, tmp_path):
    """RaTEScore's package is not in the stand-in environment; GREEN on a CPU-only environment
    says why (memory and time), never substitutes."""
    (tmp_path / "ratescore").mkdir()
    rate = WorkerMetric(SPECS["ratescore"], worker_env)
    green = WorkerMetric(SPECS["green"], worker_env)
    report = score(["a"], ["a"], [rate, green], n_resamples=0)
    assert "could not start" in report.unavailable["ratescore"]
    assert "RaTEScore" in report.unavailable["ratescore"]
    assert "needs a CUDA GPU" in report.unavailable["green"]
    assert "14 GB" in report.unavailable["green"]
    nowhere = WorkerMetric(SPECS["ratescore"], tmp_path / "none")
    assert "rrg-review metrics setup-worker ratescore" in nowhere.available()[1]


def test_the_worker_answers_bad_requests_without_dying(worker_env):
    worker = Path(__file__).resolve().parents[1] / "src" / "rrg_review" / "metrics" / "worker.py"
    requests = "\n".join([
        "not json",
        json.dumps({"id": 1, "hyps": ["a"], "refs": []}),
        json.dumps({"id": 2, "hyps": ["a b"], "refs": ["a"]}),
        json.dumps({"op": "shutdown"}),
    ]) + "\n"
    res = subprocess.run([str(venv_python(worker_env)), str(worker), "--metric", "selftest"],
                         input=requests, capture_output=True, text=True, timeout=60)
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert res.returncode == 0 and lines[0]["ready"] is True
    assert "not JSON" in lines[1]["error"]
    assert lines[2] == {"id": 1, "error": "ValueError: 1 hypotheses but 0 references"}
    assert lines[3]["id"] == 2 and lines[3]["values"] == [0.5]


def test_the_worker_answers_json_that_is_not_an_object_and_keeps_serving(worker_env):
    worker = Path(__file__).resolve().parents[1] / "src" / "rrg_review" / "metrics" / "worker.py"
    requests = "\n".join(["[1]", '"x"', "3", "null", json.dumps({"id": 1, "hyps": "ab",
                                                                   "refs": "cd"}),
                          json.dumps({"id": 2, "hyps": ["a b"], "refs": ["a"]}),
                          json.dumps({"op": "shutdown"})]) + "\n"
    res = subprocess.run([str(venv_python(worker_env)), str(worker), "--metric", "selftest"],
                         input=requests, capture_output=True, text=True, timeout=60)
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert res.returncode == 0 and lines[0]["ready"] is True, res.stderr[-2000:]
    assert [line["error"] for line in lines[1:5]] == [
        "not a JSON object: list", "not a JSON object: str", "not a JSON object: int",
        "not a JSON object: NoneType"]
    assert lines[5] == {"id": 1, "error": "ValueError: hyps and refs must be lists of strings"}
    assert lines[6]["id"] == 2 and lines[6]["values"] == [0.5]


def test_a_setup_worker_run_during_the_process_renews_the_version_and_the_worker(tmp_path):
    """The version is the installed packages' hash: a `setup-worker` run (or a reinstall with
    other packages) while a WorkerMetric lives changes it, and a running worker is restarted."""
    folder = tmp_path / "selftest"
    metric = WorkerMetric(SPECS["selftest"], folder)
    try:
        assert metric.version == "worker-selftest-none"
        assert cli(["metrics", "setup-worker", "selftest", "--dir", str(folder)]) == 0
        stamp = json.loads((folder / STAMP).read_text())
        assert metric.version == f"worker-selftest-{stamp['freeze_sha256'][:12]}"
        assert metric.compute(["a b"], ["b c"]) == [{"selftest": pytest.approx(1 / 3)}]
        first = metric._proc
        stamp["freeze_sha256"] = "ab" * 32  # other packages installed into the environment
        (folder / STAMP).write_text(json.dumps(stamp) + "\n")
        assert metric.version == "worker-selftest-abababababab"
        assert metric.compute(["a b"], ["a b"]) == [{"selftest": 1.0}]
        assert metric._proc is not first and first.poll() is not None
    finally:
        metric.close()


def test_setup_worker_refuses_an_unknown_metric(capsys):
    assert cli(["metrics", "setup-worker", "meteor"]) == 2
    assert "unknown worker metric 'meteor'" in capsys.readouterr().err


@pytest.mark.slow
def test_setup_worker_installs_its_requirements_from_the_registry(tmp_path, monkeypatch):
    """The pip path of setup-worker (a small pure-Python requirement standing in for a metric
    package): installed into the worker's environment only, its versions in the stamp."""
    from dataclasses import replace

    import rrg_review.metrics.worker_client as client

    spec = replace(SPECS["selftest"], requirements=("six==1.17.0",))
    monkeypatch.setitem(client.SPECS, "selftest", spec)
    try:
        folder = client.setup_worker("selftest", tmp_path / "env")
    except RuntimeError as exc:
        if any(s in str(exc) for s in ("Could not find a version", "NewConnectionError",
                                       "Network is unreachable", "Temporary failure")):
            pytest.skip(f"the package registry is not reachable: {exc}")
        raise
    stamp = json.loads((folder / STAMP).read_text())
    assert stamp["requirements"] == ["six==1.17.0"]
    out = subprocess.run([str(venv_python(folder)), "-c", "import six; print(six.__version__)"],
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1.17.0"
    metric = WorkerMetric(spec, folder)
    try:
        assert metric.compute(["a"], ["a"]) == [{"selftest": 1.0}]
        assert metric.version == f"worker-selftest-{stamp['freeze_sha256'][:12]}"
    finally:
        metric.close()


def test_selfcheck_runs_the_packages_weight_free_code_in_its_environment(worker_env):
    from rrg_review.metrics.worker_client import selfcheck

    assert selfcheck("selftest", worker_env) == {"ok": True}
    missing = selfcheck("ratescore", worker_env)  # the stand-in env lacks RaTEScore
    assert missing["ok"] is False and "No module named" in missing["error"]


def test_selfcheck_reports_a_missing_or_hanging_interpreter_without_a_traceback(tmp_path):
    from rrg_review.metrics.worker_client import selfcheck

    missing = selfcheck("selftest", tmp_path / "never-set-up")
    assert missing["ok"] is False
    assert "cannot run" in missing["error"] and "setup-worker selftest" in missing["error"]
    hanging = tmp_path / "hangs"
    python = venv_python(hanging)
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\nexec sleep 30\n")
    python.chmod(0o755)
    slow = selfcheck("selftest", hanging, timeout=0.5)
    assert slow["ok"] is False and "no answer within 0.5 s" in slow["error"]
    python.write_text("#!/bin/sh\necho 3\necho broken >&2\n")
    assert selfcheck("selftest", hanging) == {"ok": False, "error": "broken"}


def test_ratescore_package_code_runs_in_a_real_ratescore_worker(monkeypatch):
    """Where `rrg-review metrics setup-worker ratescore` has been run (its environment is
    large: torch, medspacy), RaTEScore's own sentence splitting and weighted similarity run
    there without its weights."""
    import os

    from rrg_review.metrics.worker_client import selfcheck, workers_root

    folder = Path(os.environ.get("RRG_REVIEW_RATESCORE_WORKER") or workers_root() / "ratescore")
    if not venv_python(folder).is_file():
        pytest.skip(f"no RaTEScore worker environment at {folder} (create it with "
                    "`rrg-review metrics setup-worker ratescore`)")
    check = selfcheck("ratescore", folder)
    assert check["ok"], check
    assert (check["sentences"], check["starts"]) == (
        ["No pneumothorax.", "Small left effusion."], [1, 0])  # "ok" is under 3 characters
    # ratescore 0.6.0's default ("long") matrix: abnormality vs non-abnormality, anatomy vs
    # non-abnormality, and its negation weight
    abn_neg, anat_neg, neg = 0.5431049700217344, 0.02097055139911715, 0.8716553966489615
    assert check["compute"] == pytest.approx(abn_neg * neg / (abn_neg + anat_neg), abs=1e-6)
    # without its weights (offline, not cached) the real worker says so, nothing is faked
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    metric = WorkerMetric(SPECS["ratescore"], folder, device="cpu")
    report = score(["no effusion"], ["no pleural effusion"], [metric], n_resamples=0)
    assert "could not start" in report.unavailable["ratescore"]


def test_ratescore_runs_its_whole_path_in_the_worker_on_tiny_models(tmp_path):
    """The real package in its own environment, on tiny local models of its two model kinds:
    values through the worker equal a direct RaTEScore call in that environment."""
    import os

    from rrg_review.metrics.worker_client import workers_root
    from tests.tiny_metric_models import tiny_rate_models

    folder = Path(os.environ.get("RRG_REVIEW_RATESCORE_WORKER") or workers_root() / "ratescore")
    if not venv_python(folder).is_file():
        pytest.skip(f"no RaTEScore worker environment at {folder}")
    ner, enc = tiny_rate_models(tmp_path)
    hyps = ["No pleural effusion. Mild cardiomegaly.", "The lungs are clear.", "", "ok",
            "Small left basilar atelectasis."]
    refs = ["No effusion. Heart size is normal.", "Lungs clear.", "No acute process.",
            "Stable.", "Left basilar opacity, likely atelectasis."]
    metric = WorkerMetric(SPECS["ratescore"], folder, device="cpu",
                          options={"bert_model": str(ner), "eval_model": str(enc)})
    try:
        report = score(hyps, refs, [metric], FileCache(tmp_path / "c.sqlite"), n_resamples=0)
    finally:
        metric.close()
    assert "ratescore" not in report.unavailable, report.unavailable
    code = ("import json, sys; from RaTEScore import RaTEScore; "
            "s = RaTEScore(bert_model=sys.argv[1], eval_model=sys.argv[2], use_gpu=False); "
            "print(json.dumps(s.compute_score(json.loads(sys.argv[3]), json.loads(sys.argv[4]))))")
    # the package itself on the pairs it can align (it drops reports without a sentence and
    # would shift later scores); the empty and the 2-character hypotheses get its 0.5
    kept = [0, 1, 4]
    direct = subprocess.run([str(venv_python(folder)), "-c", code, str(ner), str(enc),
                             json.dumps([hyps[i] for i in kept]),
                             json.dumps([refs[i] for i in kept])],
                            capture_output=True, text=True, check=True, timeout=600)
    expected = json.loads(direct.stdout.strip().splitlines()[-1])
    got = report.per_sample["ratescore"]
    assert [got[i] for i in kept] == pytest.approx(expected, abs=1e-6)
    assert all(v != 0.5 for v in expected)  # entities were found: the whole path ran
    assert (got[2], got[3]) == (0.5, 0.5)
