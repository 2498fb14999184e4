"""Caches of metric results, keyed by metric, version, model and text hashes.

Two levels: per-pair payloads (so a new run pays only for pairs never scored before) and whole
matrices per exact list of pairs (so re-scoring the same lists is one lookup, not one per pair).
`ScoreCache` is the interface; `FileCache` is the local SQLite file used without a database; the
app's database provides its own (db/metric_cache.py).
"""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

import numpy as np

from rrg_review.metrics.base import Payload

Key = tuple[str, str]  # (hypothesis hash, reference hash)
_CHUNK = 400  # keys per lookup query (two parameters each, under SQLite's variable limit)


class ScoreCache(Protocol):
    """What scoring needs from a cache; values are keyed by (metric, version, model id) so a
    new package version or other weights never return earlier values."""

    def get_many(self, metric: str, version: str, model_id: str,
                 keys: Iterable[Key]) -> dict[Key, Payload]:
        """Args:
            metric, version, model_id: the metric's identity (`Metric.cache_id` as model id).
            keys: (hypothesis hash, reference hash) pairs.

        Returns:
            key -> payload for the keys found; missing keys are absent.
        """
        ...

    def put_many(self, metric: str, version: str, model_id: str,
                 items: Mapping[Key, Payload]) -> None:
        """Args:
            metric, version, model_id: the metric's identity.
            items: key -> payload; an existing key is replaced.
        """
        ...

    def get_matrix(self, metric: str, version: str, model_id: str,
                   digest: str) -> np.ndarray | None:
        """Args:
            metric, version, model_id: the metric's identity.
            digest: `scoring.corpus_digest` of the exact ordered pairs.

        Returns:
            The matrix stored for those pairs, or None.
        """
        ...

    def put_matrix(self, metric: str, version: str, model_id: str, digest: str,
                   matrix: np.ndarray) -> None:
        """Args:
            metric, version, model_id: the metric's identity.
            digest: `scoring.corpus_digest` of the exact ordered pairs.
            matrix: the metric's matrix for them; an existing one is replaced.
        """
        ...


def matrix_bytes(matrix: np.ndarray) -> bytes:
    """A matrix as .npy bytes for a BLOB column (no pickle, so reading it runs no code).

    Args:
        matrix: a numeric array.

    Returns:
        The .npy file's bytes (shape and dtype kept).
    """
    buf = io.BytesIO()
    np.save(buf, matrix, allow_pickle=False)
    return buf.getvalue()


def matrix_from_bytes(data: bytes) -> np.ndarray:
    """Args:
        data: bytes from `matrix_bytes`.

    Returns:
        The array.

    Raises:
        ValueError: the bytes are not a .npy array or would need unpickling.
    """
    matrix: np.ndarray = np.load(io.BytesIO(data), allow_pickle=False)
    return matrix


class FileCache:
    """A SQLite file of payloads (stdlib only); safe for several processes (WAL)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        with self._db() as con:
            con.execute("CREATE TABLE IF NOT EXISTS payload (metric TEXT, version TEXT, "
                        "model_id TEXT, hyp TEXT, ref TEXT, value TEXT, "
                        "PRIMARY KEY (metric, version, model_id, hyp, ref))")
            con.execute("CREATE TABLE IF NOT EXISTS corpus (metric TEXT, version TEXT, "
                        "model_id TEXT, digest TEXT, matrix BLOB, "
                        "PRIMARY KEY (metric, version, model_id, digest))")

    def _db(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = sqlite3.connect(self.path, timeout=30)
            con.execute("PRAGMA journal_mode=WAL")
            self._local.con = con
        return con

    def get_many(self, metric: str, version: str, model_id: str,
                 keys: Iterable[Key]) -> dict[Key, Payload]:
        """`ScoreCache.get_many`: the payloads found for these keys (missing keys absent).

        Looked up by primary key, a chunk of keys per query, so the cost follows the keys
        asked for, not how many pairs of this metric the file holds.
        """
        wanted = list(dict.fromkeys(keys))
        found: dict[Key, Payload] = {}
        con = self._db()
        for start in range(0, len(wanted), _CHUNK):
            part = wanted[start:start + _CHUNK]
            pairs = ", ".join(["(?, ?)"] * len(part))
            # CROSS JOIN keeps the asked keys as the outer loop: one primary-key search each
            rows = con.execute(f"SELECT p.hyp, p.ref, p.value FROM (VALUES {pairs}) AS k "  # noqa: S608 - placeholders only
                               "CROSS JOIN payload AS p ON p.metric=? AND p.version=? AND "
                               "p.model_id=? AND p.hyp=k.column1 AND p.ref=k.column2",
                               (*(x for k in part for x in k), metric, version, model_id))
            for hyp, ref, value in rows:
                found[(hyp, ref)] = json.loads(value)
        return found

    def put_many(self, metric: str, version: str, model_id: str,
                 items: Mapping[Key, Payload]) -> None:
        """`ScoreCache.put_many`: store payloads in one transaction, replacing existing keys."""
        with self._db() as con:
            con.executemany("INSERT OR REPLACE INTO payload VALUES (?, ?, ?, ?, ?, ?)",
                            [(metric, version, model_id, h, r, json.dumps(p))
                             for (h, r), p in items.items()])

    def get_matrix(self, metric: str, version: str, model_id: str,
                   digest: str) -> np.ndarray | None:
        """`ScoreCache.get_matrix`: the matrix stored for these exact pairs, or None."""
        row = self._db().execute("SELECT matrix FROM corpus WHERE metric=? AND version=? AND "
                                 "model_id=? AND digest=?",
                                 (metric, version, model_id, digest)).fetchone()
        return matrix_from_bytes(row[0]) if row else None

    def put_matrix(self, metric: str, version: str, model_id: str, digest: str,
                   matrix: np.ndarray) -> None:
        """`ScoreCache.put_matrix`: store the matrix for these exact pairs (replacing one)."""
        with self._db() as con:
            con.execute("INSERT OR REPLACE INTO corpus VALUES (?, ?, ?, ?, ?)",
                        (metric, version, model_id, digest, matrix_bytes(matrix)))
