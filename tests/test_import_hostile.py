"""Hostile inputs (issue 11): every bad record is reported with its file and reason, never ends
the import, never shows a traceback, never hangs, never reads outside the dataset root, and
never leaves half a study stored."""

from __future__ import annotations

import gzip
import io
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pydicom
import pytest
from PIL import Image as PILImage
from sqlalchemy import func, select

from rrg_review.app.ingest.service import import_path
from rrg_review.db.models import Image, Study
from rrg_review.studies.errors import DatasetLayoutError
from rrg_review.studies.records import ImageSource
from tests import layouts
from tests.conftest import rg1

ROOT = Path(__file__).resolve().parents[1]


def run_import(db, settings, path, **kw):
    t0 = time.monotonic()
    report = import_path(db, path, blobs=settings.blobs, workers=1, **kw)
    assert time.monotonic() - t0 < 60, "import took too long (a hang?)"
    assert report.added + report.updated + report.unchanged + report.failed == report.found
    return report


def cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "rrg_review.app.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    return proc


def stored_uris(db) -> list[str]:
    with db.read() as s:
        return list(s.scalars(select(Image.uri)))


def png16(pixels) -> bytes:
    return layouts.png_bytes(pixels, bits=16)


def bomb_png() -> bytes:
    """A 20000 x 20000 bilevel PNG: 48 KB on disk, 400 megapixels decoded."""
    buf = io.BytesIO()
    PILImage.new("1", (20000, 20000)).save(buf, format="PNG")
    return buf.getvalue()


def dicom_bytes(mod=None) -> bytes:
    ds = pydicom.dcmread(rg1("RG1_UNCR.dcm"))
    if mod is not None:
        mod(ds)
    buf = io.BytesIO()
    ds.save_as(buf, enforce_file_format=True)
    return buf.getvalue()


def bad_slope(ds):
    ds.RescaleSlope, ds.RescaleIntercept = "1e308", "0"


def short_voi_lut(ds):
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence

    for k in ("WindowCenter", "WindowWidth"):
        ds.pop(k, None)
    item = Dataset()
    item.LUTDescriptor = [4096, 0, 16]
    item.add_new(0x00283006, "OW", struct.pack("<2H", 0, 100))
    ds.VOILUTSequence = Sequence([item])


# --- one hostile ReXGradient download through the real CLI --------------------------------------

def hostile_rexgradient(root: Path, pixels) -> dict[str, str]:
    """A ReXGradient folder where most records are hostile; returns key -> expected reason."""
    layouts.write(root / "outside-secret.png", png16(pixels))  # outside the dataset root
    data = root / "ds"
    (data / "metadata").mkdir(parents=True)

    def img(name: str, payload: bytes | None = None) -> str:
        rel = f"deid_png/P/{name}.png"
        if payload is not None:
            layouts.write(data / rel, payload)
        return "../" + rel

    os.mkfifo(data / "fifo.png")
    (data / "deid_png" / "P").mkdir(parents=True, exist_ok=True)
    os.symlink(root / "outside-secret.png", data / "deid_png" / "P" / "link.png")
    good = png16(pixels)
    cases = {
        "GOOD1": ([img("good1", good)], None),
        "TRUNC": ([img("trunc", good[:200])], "corrupt PNG"),
        "ZERO": ([img("zero", b"")], "not a DICOM, PNG or JPEG"),
        "NOISE": ([img("noise", os.urandom(5000))], "not a DICOM, PNG or JPEG"),
        "BOMB": ([img("bomb", bomb_png())], "decompression-bomb"),
        "FIFO": (["../fifo.png"], "FIFO"),
        "LINK": ([img("link")], "symbolic link"),
        "DOTDOT": (["../../outside-secret.png"], "outside the dataset root"),
        "ABS": ([str(root / "outside-secret.png")], "absolute image path"),
        "MISSING": ([img("missing")], "file not found"),
        "SLOPE": ([img("slope", dicom_bytes(bad_slope))], "not finite"),
        "VOI": ([img("voi", dicom_bytes(short_voi_lut))], "cannot be displayed"),
        "HALF": ([img("half_ok", good), img("half_bad", good[:300])], "corrupt PNG"),
        "GOOD2": ([img("good2", good)], None),
    }
    rows = {}
    for acc, (paths, _) in cases.items():
        rows[f"pP_a{acc}_s1"] = {
            "PatientID": "P", "AccessionNumber": acc, "StudyDate": 20200101,
            "Findings": float("nan"), "Impression": "x", "ImagePath": paths,
            "ImageViewPosition": ["PA"] * len(paths)}
    rows["pP_aLEN_s1"] = {"PatientID": "P", "AccessionNumber": "LEN", "StudyDate": 20200101,
                          "ImagePath": [img("len1", good)], "ImageViewPosition": ["PA", "LL"]}
    rows["nested-record"] = {"PatientID": "P", "AccessionNumber": {"a": [1]},
                             "ImagePath": [img("n", good)]}
    rows["pP_aSTR_s1"] = "just a string"
    rows["pP_aDATE_s1"] = {"PatientID": "P", "AccessionNumber": "DATE", "StudyDate": "someday",
                           "ImagePath": [img("date", good)]}
    rows["pP_aNOIMG_s1"] = {"PatientID": "P", "AccessionNumber": "NOIMG", "StudyDate": 20200101,
                            "ImagePath": float("nan"), "Findings": "x"}
    (data / "metadata" / "train_metadata_view_position.json").write_text(json.dumps(rows))
    expected = {acc: reason for acc, (_, reason) in cases.items() if reason}
    expected.update(LEN="ImageViewPosition values", NESTED="no PatientID/AccessionNumber",
                    STR="not an object", DATE="unreadable study date",
                    NOIMG="has no ImagePath")
    return expected


def test_hostile_dataset_through_the_cli(tmp_path, rg1_small):
    expected = hostile_rexgradient(tmp_path, rg1_small)
    db = tmp_path / "h.sqlite"
    proc = cli("import", str(tmp_path / "ds"), "--db", str(db), "--show-errors", "100")
    assert proc.returncode == 1, proc.stderr
    assert f"{len(expected) + 2} records: 2 added, 0 updated, 0 unchanged, {len(expected)} failed" \
        in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if "failed:" in ln]
    assert len(lines) == len(expected)
    missing = next(ln for ln in lines if "missing.png" in ln)
    assert ".." not in missing and "/ds/deid_png/P/missing.png" in missing  # a normalised path
    for key, reason in expected.items():
        hit = [ln for ln in lines if f"a{key}_s1" in ln or f"{key.lower()}-record" in ln
               or f"/{key.lower()}" in ln or (key == "FIFO" and "fifo.png" in ln)
               or (key == "ABS" and "absolute" in ln)
               or (key == "DOTDOT" and "../../outside" in ln)]
        assert hit and reason in hit[0], (key, reason, hit)
    # nothing outside the root was stored or read into the database; no half study
    from rrg_review.db.engine import open_database

    database = open_database(str(db))
    try:
        uris = stored_uris(database)
        assert len(uris) == 2 and not any("outside" in u or "half_ok" in u for u in uris)
        with database.read() as s:
            assert sorted(s.scalars(select(Study.study_key))) == ["GOOD1", "GOOD2"]
    finally:
        database.dispose()
    # a second run repeats the failures, keeps the good studies, and still exits 1
    again = cli("import", str(tmp_path / "ds"), "--db", str(db))
    assert again.returncode == 1 and "2 unchanged" in again.stdout


def test_follow_symlinks_reads_the_link_target(db, settings, tmp_path, rg1_small):
    hostile_rexgradient(tmp_path, rg1_small)
    report = run_import(db, settings, tmp_path / "ds", follow_symlinks=True)
    assert "LINK" in {s for s in _stored_keys(db)}
    assert report.added == 3


def _stored_keys(db) -> set[str]:
    with db.read() as s:
        return set(s.scalars(select(Study.study_key)))


# --- escapes in every metadata format -----------------------------------------------------------

def test_rexrank_escapes(db, settings, tmp_path, rg1_small):
    layouts.write(tmp_path / "secret.jpg", layouts.jpeg_bytes(rg1_small))
    root = tmp_path / "mimic-cxr"
    path = layouts.rexrank_mimic(root, rg1_small)
    data = json.loads(path.read_text())
    base = {**data["57977208"], "frontal_lateral": ["antero-posterior"]}
    data["X1"] = {**base, "image_path": ["/../../secret.jpg"]}
    data["X2"] = {**base, "image_path": ["//etc/passwd"]}
    data["X3"] = {**base, "image_path": [["nested"]]}
    path.write_text(json.dumps(data))
    report = run_import(db, settings, path)
    assert (report.added, report.failed) == (2, 3)
    reasons = " | ".join(str(p) for p in report.problems)
    assert "outside the dataset root" in reasons and "absolute image path" in reasons
    assert "is not a path" in reasons
    assert not any("secret" in u or "passwd" in u for u in stored_uris(db))


def test_interpret_cxr_escapes(db, settings, tmp_path, rg1_small):
    layouts.write(tmp_path / "secret.png", layouts.png_bytes(rg1_small))
    base = tmp_path / "ds"
    layouts.write(base / "ok.png", layouts.png_bytes(rg1_small))
    rows = [{"source": "X", "findings": "a", "impression": "b", "images_path": [p]}
            for p in ("ok.png", "../secret.png", str(tmp_path / "secret.png"), "a\x00b")]
    layouts.write(base / "valid.json", json.dumps(rows))
    report = run_import(db, settings, base / "valid.json")
    assert (report.added, report.failed) == (1, 3)
    assert not any("secret" in u for u in stored_uris(db))


def test_open_i_escapes_and_entities(db, settings, tmp_path, rg1_small):
    xml_dir = tmp_path / "ecgen-radiology"
    layouts.write(tmp_path / "NLMCXR_png" / "ok.png", layouts.png_bytes(rg1_small))
    layouts.write(tmp_path / "secret.png", layouts.png_bytes(rg1_small))
    layouts.write(xml_dir / "1.xml", layouts.iu_xml("CXR1", "a", "b", ["ok"]))
    layouts.write(xml_dir / "2.xml", layouts.iu_xml("CXR2", "a", "b", ["../secret"]))
    layouts.write(xml_dir / "3.xml", '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]>'
                                     '<eCitation><uId id="CXR3"/></eCitation>')
    layouts.write(xml_dir / "4.xml", "<eCitation><uId id='CXR4'/>")  # truncated
    (xml_dir / "5.xml").write_bytes(b"\xff\xfe<eCitation>\x00")  # bad encoding
    report = run_import(db, settings, xml_dir)
    assert (report.added, report.failed) == (1, 4), report.problems
    reasons = " | ".join(str(p) for p in report.problems)
    assert "invalid image id" in reasons and "DOCTYPE" in reasons and "malformed XML" in reasons
    assert not any("secret" in u for u in stored_uris(db))


def test_mimic_hostile_ids_and_truncated_gzip(db, settings, tmp_path, rg1_small):
    parent = layouts.mimic_download(tmp_path, rg1_small)
    base = parent / "2.0.0"
    meta = base / "mimic-cxr-2.0.0-metadata.csv.gz"
    text = gzip.decompress(meta.read_bytes()).decode()
    text += "../../x,10000032,59999999,,PA,1,1,21800506,1\n"
    meta.write_bytes(gzip.compress(text.encode())[:-30])  # and truncated
    report = run_import(db, settings, parent)
    reasons = " | ".join(str(p) for p in report.problems)
    assert "reading this file stopped" in reasons
    assert report.added >= 1


def test_plain_folder_report_files(db, settings, tmp_path, rg1_small):
    root = tmp_path / "cases"
    png = layouts.png_bytes(rg1_small)
    for case in ("ok", "bigtxt", "badjson", "nested", "latin1", "fifo"):
        layouts.write(root / case / "a.png", png)
    layouts.write(root / "ok" / "report.json", json.dumps({"findings": "nan", "impression": "x",
                                                           "sex": None}))
    with open(root / "bigtxt" / "report.txt", "wb") as fh:
        fh.write(b"FINDINGS: " + b"a" * (50 << 20))
    layouts.write(root / "badjson" / "report.json", "{not json")
    layouts.write(root / "nested" / "report.json", "[" * 100000 + "]" * 100000)
    (root / "latin1" / "report.txt").write_bytes("FINDINGS: caf\xe9".encode("latin-1"))
    os.mkfifo(root / "fifo" / "report.json")
    os.mkfifo(root / "ok" / "b.png")
    report = run_import(db, settings, root)
    assert report.added == 1, report.problems
    reasons = {Path(p.where).parent.name: p.reason for p in report.problems}
    assert "too large" in reasons["bigtxt"] and "invalid JSON" in reasons["badjson"]
    assert "not UTF-8" in reasons["latin1"] and "FIFO" in reasons["fifo"]
    assert "nested too deeply" in reasons["nested"] or "JSON" in reasons["nested"]
    assert any("b.png" in p.where and "FIFO" in p.reason for p in report.problems)
    with db.read() as s:
        study = s.scalar(select(Study))
        assert study.demographics == {}
        from rrg_review.db.store import get_study

        assert get_study(s, study.id).reference.findings is None


# --- images --------------------------------------------------------------------------------------

def test_dicom_followed_by_gigabytes_of_zeros_is_refused_fast(db, settings, tmp_path):
    root = tmp_path / "cases"
    big = root / "big" / "a.dcm"
    big.parent.mkdir(parents=True)
    big.write_bytes(Path(rg1("RG1_UNCR.dcm")).read_bytes())
    with open(big, "r+b") as fh:
        fh.truncate(os.path.getsize(big) + (1536 << 20))  # sparse: 1.5 GB of zeros
    small = root / "small" / "a.dcm"
    small.parent.mkdir(parents=True)
    small.write_bytes(Path(rg1("RG1_UNCR.dcm")).read_bytes() + bytes(8 << 20))
    report = run_import(db, settings, root)
    assert report.added == 0 or report.added == 1
    reasons = " | ".join(str(p) for p in report.problems)
    assert "too large" in reasons and str(big) in reasons


def test_trailing_zeros_after_pixel_data_are_cut_not_parsed(tmp_path):
    from rrg_review.studies.pixels import inspect

    data = Path(rg1("RG1_UNCR.dcm")).read_bytes() + bytes(32 << 20)
    t0 = time.monotonic()
    info = inspect(ImageSource(name="padded.dcm", data=data))
    assert info.rows > 0 and time.monotonic() - t0 < 30


def test_embedded_bomb_and_garbage_in_interpret_cxr(db, settings, tmp_path, rg1_small):
    rows = [{"source": "X", "findings": "a", "impression": "b",
             "images": [{"bytes": payload, "path": None}], "images_path": [f"x/{i}.png"]}
            for i, payload in enumerate((layouts.png_bytes(rg1_small), bomb_png(),
                                         b"\x89PNG\r\n\x1a\n" + b"\x00" * 50))]
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "d").mkdir()
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d" / "train-00000-of-00001.parquet")
    report = run_import(db, settings, tmp_path / "d")
    assert (report.added, report.failed) == (1, 2)
    assert "decompression-bomb" in report.problems[0].reason
    # no blob of a failed study is left behind
    blobs = [p for p in settings.blobs.root.rglob("*") if p.is_file()]
    assert len(blobs) == 1


def test_missing_columns_and_nested_json_are_layout_errors(db, settings, tmp_path):
    meta = tmp_path / "rex" / "metadata"
    meta.mkdir(parents=True)
    (meta / "train_metadata.csv").write_text("PatientID,StudyDate\nP,20200101\n")
    # detection needs AccessionNumber; the forced format names the missing column
    with pytest.raises(DatasetLayoutError, match="AccessionNumber"):
        run_import(db, settings, tmp_path / "rex", fmt="rexgradient")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200000 + "]" * 200000)
    with pytest.raises(DatasetLayoutError, match="nested too deeply"):
        run_import(db, settings, deep, fmt="interpret-cxr")
    with db.read() as s:
        assert s.scalar(select(func.count(Study.id))) == 0


def test_cli_layout_error_exits_2_without_traceback(tmp_path):
    (tmp_path / "empty").mkdir()
    proc = cli("import", str(tmp_path / "empty"), "--db", str(tmp_path / "x.sqlite"))
    assert proc.returncode == 2 and "no known dataset layout" in proc.stderr


def test_fifo_as_dataset_and_as_metadata_never_blocks(tmp_path):
    os.mkfifo(tmp_path / "train_metadata.csv")
    proc = cli("import", str(tmp_path / "train_metadata.csv"), "--format", "rexgradient",
               "--db", str(tmp_path / "x.sqlite"), timeout=60)
    assert proc.returncode == 2 and "FIFO" in proc.stderr


def test_pixels_limit_for_dicom_header(tmp_path):
    from rrg_review.studies.errors import StudyLoadError
    from rrg_review.studies.pixels import ImageCheck, inspect

    def huge(ds):
        ds.Rows, ds.Columns = 65535, 65535

    with pytest.raises(StudyLoadError, match="decompression-bomb"):
        inspect(ImageSource(name="huge.dcm", data=dicom_bytes(huge)), ImageCheck())
    assert np.isfinite(1.0)


def test_csv_with_a_bad_byte_mid_file_is_reported_and_the_rest_imports(db, settings, tmp_path,
                                                                        rg1_small):
    root = tmp_path / "rex"
    meta = root / "metadata"
    meta.mkdir(parents=True)
    lines = ["PatientID,AccessionNumber,StudyDate,Findings,Impression"]
    lines += [f"P{i},A{i},20200101,Clear.,Normal." for i in range(3000)]
    body = ("\n".join(lines) + "\n").encode()
    cut = body.index(b"P2000,")
    (meta / "train_metadata.csv").write_bytes(body[:cut] + b"P\xff\xfe,BAD,2020\n" + body[cut:])
    (meta / "test_metadata.csv").write_text("PatientID,AccessionNumber,StudyDate\nT,T1,20200101\n")
    report = run_import(db, settings, root)
    assert report.failed == 1 and "train_metadata.csv" in report.problems[0].where
    assert "reading this file stopped" in report.problems[0].reason
    assert report.added >= 1 and _stored_keys(db) >= {"T1", "A0"}


def test_interpret_cxr_row_without_images_fails_alone(db, settings, tmp_path, rg1_small):
    base = tmp_path / "ds"
    layouts.write(base / "ok.png", layouts.png_bytes(rg1_small))
    rows = [{"source": "X", "findings": "a", "impression": "b", "images_path": ["ok.png"]},
            {"source": "X", "findings": "a", "impression": "b", "images_path": []},
            {"source": "X", "findings": "a", "impression": "b", "images_path": "ok.png"}]
    layouts.write(base / "train.json", json.dumps(rows))
    report = run_import(db, settings, base / "train.json")
    assert (report.added, report.failed) == (1, 2)
    with db.read() as s:
        assert s.scalar(select(func.count(Study.id))) == 1


def test_mimic_ids_that_would_climb_out_are_refused(db, settings, tmp_path, rg1_small):
    parent = layouts.mimic_download(tmp_path, rg1_small)
    meta = parent / "2.0.0" / "mimic-cxr-2.0.0-metadata.csv.gz"
    text = gzip.decompress(meta.read_bytes()).decode()
    text += "../../../secret,10000032,59999999,,PA,1,1,21800506,1,,,\n"
    text += "d9,../10000032,58888888,,PA,1,1,21800506,1,,,\n"
    meta.write_bytes(gzip.compress(text.encode()))
    report = run_import(db, settings, parent)
    assert (report.added, report.failed) == (4, 2)
    reasons = " | ".join(str(p) for p in report.problems)
    assert "invalid dicom_id" in reasons and "invalid study_id/subject_id" in reasons


def test_folder_symlinks_and_loops(db, settings, tmp_path, rg1_small):
    outside = layouts.write(tmp_path / "private" / "x.png", layouts.png_bytes(rg1_small))
    root = tmp_path / "cases"
    layouts.write(root / "a" / "1.png", layouts.png_bytes(rg1_small))
    (root / "b").mkdir()
    os.symlink(outside, root / "b" / "1.png")
    os.symlink(root, root / "a" / "loop")  # a directory loop
    os.symlink(tmp_path / "private", root / "c")  # a linked folder outside the root
    report = run_import(db, settings, root)
    assert report.added == 1
    assert sum("symbolic link" in p.reason for p in report.problems) == 3
    assert not any("private" in u for u in stored_uris(db))
    followed = run_import(db, settings, root, follow_symlinks=True)
    assert followed.added == 2 and followed.unchanged == 1  # b (link) and c; no loop hang


def test_a_killed_import_leaves_only_whole_studies_and_a_rerun_finishes(tmp_path, rg1_small):
    import signal

    root = tmp_path / "rex"
    rows = {}
    for i in range(60):
        rels = []
        for j in range(2):
            rel = f"deid_png/P{i}/{j}.png"
            layouts.write(root / rel, png16(rg1_small))
            rels.append("../" + rel)
        rows[f"pP{i}_aA{i}_s1"] = {"PatientID": f"P{i}", "AccessionNumber": f"A{i}",
                                   "StudyDate": 20200101, "ImagePath": rels}
    layouts.write(root / "metadata" / "train_metadata_view_position.json", json.dumps(rows))
    db = tmp_path / "k.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "rrg_review.app.cli",
                             "import", str(root), "--db",
                             str(db), "--workers", "1"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    from rrg_review.db.engine import open_database

    database = open_database(str(db))
    try:
        with database.read() as s:
            per_study = s.execute(select(Image.study_id, func.count(Image.id))
                                  .group_by(Image.study_id)).all()
            n_studies = s.scalar(select(func.count(Study.id)))
        assert all(n == 2 for _, n in per_study) and len(per_study) == n_studies
    finally:
        database.dispose()
    rerun = cli("import", str(root), "--db", str(db))
    assert rerun.returncode == 0
    assert f"60 records: {60 - n_studies} added, 0 updated, {n_studies} unchanged" in rerun.stdout


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = next(line for line in status.read_text().splitlines()
                        if line.startswith("PPid:"))
        except (OSError, StopIteration):
            continue
        if int(ppid.split()[1]) == pid:
            found.append(int(status.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_imports_workers_end_with_it(tmp_path, rg1_small):
    """A trial killed an import (SIGKILL) and found both image-checking workers asleep 40 s
    later, re-parented to PID 1. They now end with it."""
    import signal

    root = tmp_path / "folder"
    for i in range(40):
        for j in range(3):
            layouts.write(root / f"S{i:03d}" / f"{j}.png", png16(rg1_small))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "rrg_review.app.cli", "import", str(root),
                             "--db", str(tmp_path / "k.sqlite"), "--workers", "2"], env=env,
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    workers: list[int] = []
    while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
        workers = _children(proc.pid)
        time.sleep(0.05)
    assert len(workers) >= 2, "the import never started its workers"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [w for w in workers if _alive(w)]
    for w in left:  # (not left behind by the test either)
        os.kill(w, signal.SIGKILL)
    assert left == []
