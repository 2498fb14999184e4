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


# --- layouts as the datasets are downloaded (issue 11) -----------------------------------------

NAN = float("nan")


def png16(pixels: np.ndarray) -> bytes:
    return png_bytes(pixels, bits=16)


def rexgradient_download(root: Path, pixels: np.ndarray) -> Path:
    """ReXGradient-160K as downloaded: per split a `{split}_metadata_view_position.json` (a dict
    keyed p<PatientID>_a<Acc>_s<StudyUID>, ImagePath lists written "../deid_png/...", parallel
    ImageViewPosition/ImageShape lists, StudyDate ints, PatientAge "062Y", bare NaN tokens)
    plus `{split}_metadata.csv`/`.json` (one row per study, no ImagePath). The valid split
    ships only the plain tables. Two studies of GRDN0001 are on the same day."""
    import csv

    def study(pid, acc, uid, day, views, findings, impression, *, sex="F", age="062Y",
              indication="Shortness of breath.", comparison=NAN):
        paths = []
        for i, _ in enumerate(views):
            rel = (f"deid_png/{pid}/{acc}/studies/{uid}/series/{uid}.{i}/instances/"
                   f"{uid}.{i}.1.png")
            write(root / rel, png16(pixels))
            paths.append("../" + rel)
        return {"PatientID": pid, "AccessionNumber": acc, "StudyInstanceUid": uid,
                "StudyDate": day, "PatientSex": sex, "PatientAge": age,
                "Indication": indication, "Comparison": comparison, "Findings": findings,
                "Impression": impression, "ImagePath": paths, "ImageViewPosition": views,
                "ImageShape": [list(pixels.shape)] * len(views), "BodyPartExamined": "CHEST"}

    splits = {
        "train": [study("GRDN0001", "GRDNA001", "1.2.1", 20130105, ["PA", "LATERAL"],
                        "Clear lungs.", "No acute disease."),
                  study("GRDN0001", "GRDNA002", "1.2.2", 20130105, ["AP"],
                        "New left basilar opacity.", NAN, sex=NAN),
                  study("GRDN0002", "GRDNA003", "1.2.3", 20140220, [NAN],
                        NAN, "Cardiomegaly.", age=NAN, indication=NAN)],
        "valid": [study("GRDN0003", "GRDNA004", "1.2.4", 20150707, ["PA"],
                        "Normal heart size.", "Normal chest.")],
        "test": [study("GRDN0004", "GRDNA005", "1.2.5", 20160808, ["PA", "LL"],
                       "Small right effusion.", "Right effusion.")],
    }
    meta = root / "metadata"
    meta.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        if split != "valid":
            keyed = {f"p{r['PatientID']}_a{r['AccessionNumber']}_s{r['StudyInstanceUid']}": r
                     for r in rows}
            # json.dumps writes float('nan') as the bare token NaN, as the dataset does
            write(meta / f"{split}_metadata_view_position.json", json.dumps(keyed, indent=1))
        plain = [{k: v for k, v in r.items() if not k.startswith("Image")} for r in rows]
        write(meta / f"{split}_metadata.json", json.dumps(plain))
        with open(meta / f"{split}_metadata.csv", "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(plain[0]))
            writer.writeheader()
            for r in plain:
                writer.writerow({k: ("" if isinstance(v, float) and v != v else v)
                                 for k, v in r.items()})
    return root


def rexrank_mimic(root: Path, pixels: np.ndarray) -> Path:
    """ReXrank's ReXRank_MIMICCXR_test.json (dict keyed by study; image paths with a leading
    "/" under mimic-cxr/files; frontal_lateral views; context string; NaN impression)."""
    rows = {
        "50051329": {
            "image_path": ["/p10/p10046166/s50051329/aa-1.jpg",
                           "/p10/p10046166/s50051329/bb-2.jpg"],
            "section_findings": "The lungs are low in volume.\nNo pleural effusions.",
            "section_impression": "No evidence of acute cardiopulmonary process.",
            "frontal_lateral": ["lateral", "antero-posterior"],
            "split": "test", "subject_id": 10046166,
            "context": "Age:50-60.Gender:M.Indication: ___-year-old male with confusion.",
            "key_image_path": "/p10/p10046166/s50051329/bb-2.jpg",
            "report": "Findings: The lungs are low in volume. Impression: No evidence.",
        },
        "57977208": {
            "image_path": ["/p10/p10046166/s57977208/cc-3.jpg"],
            "section_findings": "There is no evidence of pneumothorax.",
            "section_impression": NAN,
            "frontal_lateral": ["antero-posterior"],
            "split": "test", "subject_id": 10046166,
            "context": "Indication: Post-procedure.Comparison: Chest radiograph, ___.",
            "key_image_path": "/p10/p10046166/s57977208/cc-3.jpg",
            "report": "Findings: There is no evidence of pneumothorax. Impression: None.",
        },
    }
    for row in rows.values():
        for p in row["image_path"]:
            write(root / "files" / p.lstrip("/"), jpeg_bytes(pixels))
    path = root / "ReXRank_MIMICCXR_test.json"
    write(path, json.dumps(rows, indent=4))
    return path


def dicom_file(path: Path, *, study_uid: str, series: int = 1, instance: int = 1,
               modality: str = "CR", view: str | None = "PA", patient: str = "PAT-1",
               study_time: str = "101500", rgb: bool = False, sop: str | None = None,
               pixels: bool = True) -> Path:
    """A DICOM object built on the real RG1 radiograph (header fields replaced)."""
    import pydicom
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    from tests.conftest import rg1

    ds = pydicom.dcmread(rg1("RG1_UNCR.dcm"))
    ds.StudyInstanceUID = study_uid
    ds.SeriesInstanceUID = f"{study_uid}.{series}"
    ds.SOPInstanceUID = generate_uid()
    ds.file_meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    ds.SeriesNumber, ds.InstanceNumber = series, instance
    ds.Modality, ds.PatientID, ds.StudyTime = modality, patient, study_time
    if view is None:
        ds.pop("ViewPosition", None)
    else:
        ds.ViewPosition = view
    if rgb:
        arr = np.zeros((64, 48, 3), np.uint8)
        arr[..., 0] = 200
        ds.Rows, ds.Columns, ds.SamplesPerPixel, ds.PlanarConfiguration = 64, 48, 3, 0
        ds.PhotometricInterpretation, ds.BitsAllocated, ds.BitsStored, ds.HighBit = \
            "RGB", 8, 8, 7
        ds.PixelRepresentation = 0
        ds.PixelData = arr.tobytes()
        ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    if sop is not None:
        ds.SOPClassUID = sop
        ds.file_meta.MediaStorageSOPClassUID = sop
    if not pixels:
        del ds.PixelData
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(path, enforce_file_format=True)
    return path


def pacs_export(root: Path) -> Path:
    """A PACS/CD export: files without extension in series sub-folders, two studies of one
    patient mixed in one folder tree, an SR and a KO object, a CT and an RGB secondary
    capture (refused unless allowed)."""
    a, b = "1.2.826.0.1.3680043.8.498.10", "1.2.826.0.1.3680043.8.498.20"
    dicom_file(root / "EXPORT" / "SER001" / "IM000001", study_uid=a, series=1, view="PA")
    dicom_file(root / "EXPORT" / "SER002" / "IM000001", study_uid=a, series=2, view="LL")
    dicom_file(root / "EXPORT" / "SER001" / "IM000002", study_uid=b, series=1, view="AP",
               study_time="081000")
    dicom_file(root / "EXPORT" / "SER003" / "1.2.3.4.5.6.7", study_uid=a, series=3,
               sop="1.2.840.10008.5.1.4.1.1.88.11", pixels=False)  # Basic Text SR
    dicom_file(root / "EXPORT" / "SER004" / "KO0001", study_uid=b, series=4,
               sop="1.2.840.10008.5.1.4.1.1.88.59", pixels=False)  # Key Object Selection
    dicom_file(root / "CT" / "IM000001", study_uid="1.2.826.0.1.3680043.8.498.30",
               modality="CT", sop="1.2.840.10008.5.1.4.1.1.2")
    dicom_file(root / "SC" / "IM000001", study_uid="1.2.826.0.1.3680043.8.498.40",
               modality="OT", rgb=True, sop="1.2.840.10008.5.1.4.1.1.7")
    return root


def mimic_download(root: Path, pixels: np.ndarray) -> Path:
    """MIMIC-CXR-JPG under physionet.org/files/mimic-cxr-jpg/2.0.0 with gzipped CSVs, split
    'validate', StudyTime with lost leading zeros, two same-day studies of one subject, and a
    report whose only text is `last_paragraph` (create_section_files.py's columns)."""
    import gzip

    base = root / "physionet.org" / "files" / "mimic-cxr-jpg" / "2.0.0"
    studies = [("10000032", "50414267", "21800506", "84505.328", ["d1", "d2"],
                ["PA", "LATERAL"]),
               ("10000032", "53189527", "21800506", "213014.531", ["d3"], ["AP"]),
               ("10000032", "56699142", "21800505", "1200", ["d4"], [""]),
               ("10000764", "57375967", "21320717", "191012.5", ["d5"], ["AP"])]
    meta = ["dicom_id,subject_id,study_id,PerformedProcedureStepDescription,ViewPosition,"
            "Rows,Columns,StudyDate,StudyTime,ProcedureCodeSequence_CodeMeaning,"
            "ViewCodeSequence_CodeMeaning,PatientOrientationCodeSequence_CodeMeaning"]
    split = ["dicom_id,study_id,subject_id,split"]
    for subject, study, day, tm, dicoms, views in studies:
        for dicom, view in zip(dicoms, views, strict=True):
            meta.append(f"{dicom},{subject},{study},CHEST (PA AND LAT),{view},245,230,{day},"
                        f"{tm},CHEST (PA AND LAT),postero-anterior,Erect")
            which = "validate" if subject == "10000764" else "train"
            split.append(f"{dicom},{study},{subject},{which}")
            write(base / "files" / f"p{subject[:2]}" / f"p{subject}" / f"s{study}" /
                  f"{dicom}.jpg", jpeg_bytes(pixels))
    for name, lines in (("metadata", meta), ("split", split)):
        write(base / f"mimic-cxr-2.0.0-{name}.csv.gz",
              gzip.compress(("\n".join(lines) + "\n").encode()))
    write(base / "mimic_cxr_sectioned.csv",
          "study,impression,findings,last_paragraph,comparison,indication\n"
          's50414267,No acute process.,"Lungs are clear, heart normal.",,___,Cough.\n'
          "s53189527,Interval new right pleural effusion.,Right effusion.,,Prior of ___,\n"
          "s56699142,,,Portable AP view of the chest. Lines in place.,,\n")
    return root / "physionet.org" / "files" / "mimic-cxr-jpg"


def interpret_cxr_variants(root: Path, pixels: np.ndarray) -> dict[str, Path]:
    """The interpret-cxr shapes a user may point at (see the importer's docstring)."""
    import pyarrow as pa

    rows = [
        *interpret_cxr_rows(pixels),
        {"source": "OpenI", "findings": None, "impression": "  ",
         "images": [{"bytes": png_bytes(pixels), "path": None}],
         "images_path": ["OpenI/empty-report.png"]},
    ]

    def arrow(folder: Path, name: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        table = _arrow_table(rows)
        with pa.OSFile(str(folder / name), "wb") as sink, \
                pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)

    out = {}
    single = root / "single"
    arrow(single, "data-00000-of-00001.arrow")
    write(single / "state.json", json.dumps({"_data_files": [
        {"filename": "data-00000-of-00001.arrow"}], "_split": "validation"}))
    write(single / "dataset_info.json", "{}")
    out["single"] = single
    cache = root / "cache" / "stanfordaimi___interpret-cxr-public" / "default" / "0.0.0" / "abc1"
    arrow(cache, "interpret-cxr-public-validation.arrow")
    write(cache / "dataset_info.json", "{}")
    out["cache"] = cache
    # rows whose images are {bytes: None, path} (paths relative to the dataset folder)
    bypath = root / "bypath"
    write(bypath / "CheXpert" / "valid" / "p1" / "view1_frontal.jpg", jpeg_bytes(pixels))
    write(bypath / "valid.json", json.dumps([{
        "source": "CheXpert", "findings": "Clear.", "impression": "Normal.",
        "images": [{"bytes": None, "path": "CheXpert/valid/p1/view1_frontal.jpg"}],
        "images_path": ["CheXpert/valid/p1/view1_frontal.jpg"]}]))
    out["bypath"] = bypath / "valid.json"
    # a MIMIC-CXR-JPG root holding only make-interpret-mimic-cxr.py's outputs
    mimic = root / "mimic-root"
    rel = "files/p10/p10000032/s50414267/02aa804e.jpg"
    write(mimic / rel, jpeg_bytes(pixels))
    item = {"source": "MIMIC-CXR", "images": [rel], "images_path": [rel],
            "findings": "Lungs clear.", "impression": "No acute process."}
    write(mimic / "train_mimic.json", json.dumps([item]))
    write(mimic / "val_mimic.json", json.dumps([{**item, "findings": None}]))
    out["mimic-root"] = mimic
    # a test set: images only
    test = root / "test"
    pq_rows = [{"images": [{"bytes": png_bytes(pixels), "path": None}],
                "images_path": ["test/a.png"]}]
    import pyarrow.parquet as pq

    test.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(pq_rows), test / "test-00000-of-00001.parquet")
    out["test"] = test
    return out


SPACING = (0.2, 0.15)  # (row, column) mm of the calibrated film


def calibrated_dicom(path: Path, keyword: str = "PixelSpacing") -> Path:
    """pydicom-data's RG1 radiograph with a known, unequal pixel spacing (RG1's own is 0\\0)."""
    import pydicom

    from tests.conftest import rg1

    ds = pydicom.dcmread(rg1("RG1_UNCR.dcm"))
    del ds.PixelSpacing
    setattr(ds, keyword, list(SPACING))
    ds.save_as(path)
    return path
