"""The database as a metrics cache (metrics.cache.ScoreCache over the metric_result table)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import numpy as np
from sqlalchemy import select, tuple_

from rrg_review.db.engine import ROWS, Database
from rrg_review.db.models import MetricCorpus, MetricResult
from rrg_review.metrics.base import Payload
from rrg_review.metrics.cache import Key, matrix_bytes, matrix_from_bytes

_CHUNK = 400  # pairs per IN query (two parameters each, under SQLite's variable limit)


class DatabaseScoreCache:
    def __init__(self, db: Database) -> None:
        self.db = db

    def get_many(self, metric: str, version: str, model_id: str,
                 keys: Iterable[tuple[str, str]]) -> dict[Key, Payload]:
        wanted = list(dict.fromkeys(keys))
        found: dict[Key, Payload] = {}
        with self.db.read() as session:
            for start in range(0, len(wanted), _CHUNK):
                part = wanted[start:start + _CHUNK]
                rows = session.execute(select(
                    MetricResult.hyp_hash, MetricResult.ref_hash, MetricResult.payload).where(
                    MetricResult.metric == metric, MetricResult.version == version,
                    MetricResult.model_id == model_id,
                    tuple_(MetricResult.hyp_hash, MetricResult.ref_hash).in_(part)))
                for row in rows:
                    h, r, p = cast("tuple[str, str, Payload]", tuple(row))
                    found[(h, r)] = p
        return found

    def put_many(self, metric: str, version: str, model_id: str,
                 items: Mapping[Key, Payload]) -> None:
        if not items:
            return
        rows = [dict(metric=metric, version=version, model_id=model_id, hyp_hash=h, ref_hash=r,
                     payload=p) for (h, r), p in items.items()]
        with self.db.write(scope=ROWS) as session:  # one upsert: nothing else to serialise
            insert = _insert_for(session.get_bind().dialect.name)
            if insert is not None:  # a pair another scorer stored first is simply kept
                stmt = insert(MetricResult).on_conflict_do_nothing(
                    index_elements=_RESULT_KEY)
                for start in range(0, len(rows), 500):
                    session.execute(stmt, rows[start:start + 500])
                return
            stored = self.get_many(metric, version, model_id, items)
            session.add_all(MetricResult(**row) for row in rows
                            if (row["hyp_hash"], row["ref_hash"]) not in stored)

    def get_matrix(self, metric: str, version: str, model_id: str,
                   digest: str) -> np.ndarray | None:
        with self.db.read() as session:
            data = session.scalar(select(MetricCorpus.matrix).where(
                MetricCorpus.metric == metric, MetricCorpus.version == version,
                MetricCorpus.model_id == model_id, MetricCorpus.digest == digest))
        return matrix_from_bytes(data) if data is not None else None

    def put_matrix(self, metric: str, version: str, model_id: str, digest: str,
                   matrix: np.ndarray) -> None:
        values: dict[str, Any] = dict(metric=metric, version=version, model_id=model_id,
                                      digest=digest,
                      matrix=matrix_bytes(matrix))
        with self.db.write(scope=ROWS) as session:  # one upsert: nothing else to serialise
            insert = _insert_for(session.get_bind().dialect.name)
            if insert is not None:  # one statement: two scorers of the same corpus never clash
                stmt = insert(MetricCorpus).values(**values)
                session.execute(stmt.on_conflict_do_update(
                    index_elements=_CORPUS_KEY, set_={"matrix": stmt.excluded.matrix}))
                return
            row = session.scalar(select(MetricCorpus).where(
                MetricCorpus.metric == metric, MetricCorpus.version == version,
                MetricCorpus.model_id == model_id, MetricCorpus.digest == digest))
            if row is None:
                session.add(MetricCorpus(**values))
            else:
                row.matrix = values["matrix"]


_RESULT_KEY = ["metric", "version", "model_id", "hyp_hash", "ref_hash"]
_CORPUS_KEY = ["metric", "version", "model_id", "digest"]


def _insert_for(dialect: str) -> Callable[[type[Any]], Any] | None:
    """The dialect's INSERT with ON CONFLICT (SQLite and PostgreSQL), else None."""
    if dialect == "sqlite":
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert
    return None
