"""Builders of small but faithful dataset layouts on disk, with real radiograph pixels."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
from PIL import Image


def png_bytes(pixels: np.ndarray, bits: int = 8, rgb: bool = False) -> bytes:
    buf = io.BytesIO()
    if bits == 16:
        Image.fromarray(pixels.astype(np.uint16) * 257).save(buf, format="PNG")
    elif rgb:
        Image.fromarray(np.stack([pixels] * 3, axis=-1)).save(buf, format="PNG")
    else:
        Image.fromarray(pixels).save(buf, format="PNG")
    return buf.getvalue()


def jpeg_bytes(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        path.write_text(data, encoding="utf-8")
    else:
        path.write_bytes(data)
    return path


def iu_xml(uid: str, findings: str, impression: str, images: list[str],
           indication: str = "Cough", comparison: str = "None.") -> str:
    parents = "".join(
        f'<parentImage id="{i}"><figureId>F1</figureId></parentImage>' for i in images
    )
    return (
        '<?xml version="1.0" encoding="utf-8"?><eCitation><meta type="rr"/>'
        f'<uId id="{uid}"/><MedlineCitation><Article><Abstract>'
        f'<AbstractText Label="COMPARISON">{comparison}</AbstractText>'
        f'<AbstractText Label="INDICATION">{indication}</AbstractText>'
        f'<AbstractText Label="FINDINGS">{findings}</AbstractText>'
        f'<AbstractText Label="IMPRESSION">{impression}</AbstractText>'
        f"</Abstract></Article></MedlineCitation>{parents}</eCitation>"
    )


def iu_archive(root: Path, pixels: np.ndarray) -> Path:
    """NLMCXR_reports.tgz with 3 reports (one without images) and NLMCXR_png beside it."""
    docs = {
        "1": iu_xml("CXR1", "Heart size normal. Lungs clear.", "No acute disease.",
                    ["CXR1_1_IM-0001-3001", "CXR1_1_IM-0001-4001"]),
        "2": iu_xml("CXR2", "Small left effusion.", "Left effusion.", ["CXR2_1_IM-0652-1001"]),
        "3": iu_xml("CXR3", "", "Stable chest.", []),
    }
    archive = root / "NLMCXR_reports.tgz"
    root.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in docs.items():
            data = text.encode()
            info = tarfile.TarInfo(f"ecgen-radiology/{name}.xml")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for image_id in ("CXR1_1_IM-0001-3001", "CXR1_1_IM-0001-4001", "CXR2_1_IM-0652-1001"):
        write(root / "NLMCXR_png" / f"{image_id}.png", png_bytes(pixels))
    return archive


def mimic_cxr(root: Path, pixels: np.ndarray) -> Path:
    """MIMIC-CXR-JPG: files/p10/p10000032/s5.../*.jpg plus the three CSVs (split gzipped)."""
    import gzip

    studies = [("10000032", "50414267", "20180101", ["d1", "d2"], ["PA", "LATERAL"]),
               ("10000032", "53189527", "20180305", ["d3"], ["AP"]),
               ("10000764", "57375967", "20170612", ["d4"], ["PA"])]
    meta = ["dicom_id,subject_id,study_id,PerformedProcedureStepDescription,ViewPosition,"
            "Rows,Columns,StudyDate,StudyTime"]
    split = ["dicom_id,study_id,subject_id,split"]
    for subject, study, day, dicoms, views in studies:
        for dicom, view in zip(dicoms, views, strict=True):
            meta.append(f"{dicom},{subject},{study},CHEST (PA AND LAT),{view},245,230,{day},1200")
            which = "test" if subject == "10000764" else "train"
            split.append(f"{dicom},{study},{subject},{which}")
            write(root / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" / f"{dicom}.jpg",
                  jpeg_bytes(pixels))
    write(root / "mimic-cxr-2.0.0-metadata.csv", "\n".join(meta) + "\n")
    write(root / "mimic-cxr-2.0.0-split.csv.gz", gzip.compress(("\n".join(split) + "\n").encode()))
    write(root / "mimic_cxr_sectioned.csv",
          "study,impression,findings,last_paragraph,comparison\n"
          's50414267,No acute process.,"Lungs are clear, heart normal.",No acute process.,None\n'
          "s53189527,Interval new right pleural effusion.,Right effusion.,x,Prior of January\n")
    return root


def rexgradient(root: Path, pixels: np.ndarray) -> Path:
    """ReXGradient-160K: metadata/{train,test}_metadata.json keyed by study, deid_png/ PNGs."""
    def study(pid: str, acc: str, day: str, n_images: int, findings: str) -> dict:
        paths = [f"deid_png/{pid}/{acc}/studies/1.2.3/series/4/instances/{i}.png"
                 for i in range(n_images)]
        for p in paths:
            write(root / p, png_bytes(pixels, bits=16))
        return {"PatientID": pid, "AccessionNumber": acc, "StudyDate": day,
                "PatientSex": "F", "PatientAge": "061Y", "Indication": "Shortness of breath.",
                "Comparison": "None.", "Findings": findings, "Impression": "No acute findings.",
                "ImagePath": paths, "ImageViewPosition": ["PA", "LATERAL"][:n_images]}

    train = {"s1": study("GRDN1", "GRDNA1", "20200105", 2, "Clear lungs."),
             "s2": study("GRDN1", "GRDNA2", "20210302", 1, "New left basilar opacity.")}
    test = {"s3": study("GRDN2", "GRDNA3", "20190707", 1, "Normal heart size.")}
    write(root / "metadata" / "train_metadata.json", json.dumps(train))
    write(root / "metadata" / "test_metadata.json", json.dumps(test))
    return root


def plain_folder(root: Path, pixels: np.ndarray, dicom: str) -> Path:
    """One study per sub-folder: a DICOM study with report.txt, a PNG study with report.json."""
    import shutil

    (root / "case-a").mkdir(parents=True)
    shutil.copy(dicom, root / "case-a" / "image1.dcm")
    write(root / "case-a" / "report.txt",
          "INDICATION: Cough.\nFINDINGS: Multiple nodules.\nIMPRESSION: Metastases likely.\n")
    write(root / "case-b" / "frontal.png", png_bytes(pixels, rgb=True))
    write(root / "case-b" / "report.json", json.dumps(
        {"findings": "Normal.", "impression": "Normal chest.", "patient_id": "P-7",
         "study_date": "2022-02-02", "sex": "M"}))
    return root


def interpret_cxr_rows(pixels: np.ndarray) -> list[dict]:
    return [
        {"source": "CheXpert", "findings": "Lungs clear.", "impression": "Normal.",
         "images": [{"bytes": png_bytes(pixels), "path": None}],
         "images_path": ["CheXpert/train/patient1/study1/view1_frontal.jpg"]},
        {"source": "PadChest", "findings": "", "impression": "Cardiomegaly.",
         "images": [{"bytes": png_bytes(pixels, bits=16), "path": None},
                    {"bytes": jpeg_bytes(pixels), "path": None}],
         "images_path": ["PadChest/a.png", "PadChest/b.png"]},
    ]


def _arrow_table(rows: list[dict]):
    import pyarrow as pa

    schema = pa.schema([
        ("source", pa.string()), ("findings", pa.string()), ("impression", pa.string()),
        ("images", pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))),
        ("images_path", pa.list_(pa.string())),
    ])
    return pa.Table.from_pylist(rows, schema=schema)


def interpret_cxr_parquet(root: Path, pixels: np.ndarray) -> Path:
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    path = root / "validation-00000-of-00001.parquet"
    pq.write_table(_arrow_table(interpret_cxr_rows(pixels)), path)
    return path


def interpret_cxr_saved(root: Path, pixels: np.ndarray) -> Path:
    """What `DatasetDict.save_to_disk` writes: dataset_dict.json + one Arrow-stream dir a split."""
    import pyarrow as pa

    for split in ("train", "validation"):
        folder = root / split
        folder.mkdir(parents=True)
        table = _arrow_table(interpret_cxr_rows(pixels))
        with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        write(folder / "state.json", json.dumps({"_data_files": [
            {"filename": "data-00000-of-00001.arrow"}], "_split": split}))
        write(folder / "dataset_info.json", "{}")
    write(root / "dataset_dict.json", json.dumps({"splits": ["train", "validation"]}))
    return root
