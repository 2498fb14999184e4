"""Shared fixtures: a real SQLite database per test, real radiographs, the shared data folder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.settings import Settings
from db.engine import Database, open_database

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
IU_ARCHIVE = SHARED_DATA / "NLMCXR_reports.tgz"


def rg1(name: str = "RG1_UNCI.dcm") -> str:
    from pydicom.data import get_testdata_file

    return get_testdata_file(name)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_args(str(tmp_path / "test.sqlite"))


@pytest.fixture
def db(settings: Settings) -> Database:
    database = open_database(settings.db_url)
    yield database
    database.dispose()


@pytest.fixture
def iu_archive() -> Path:
    if not IU_ARCHIVE.is_file():
        pytest.skip(f"shared IU X-ray archive not found at {IU_ARCHIVE} (../shared is absent)")
    return IU_ARCHIVE


@pytest.fixture(scope="session")
def rg1_small() -> np.ndarray:
    """The real RG1 radiograph as a 16-bit display image (bone white), shrunk to 245x230."""
    from studies.pixels import decode
    from studies.records import ImageSource

    image = decode(ImageSource(name="RG1", path=rg1()))
    return image.display[::8, ::8].copy()
