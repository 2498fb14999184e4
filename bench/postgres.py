"""The PostgreSQL database a bench script times: the one given with `--db`, else a fresh
database on a throw-away server started from the machine's binaries (tests/postgres_server.py),
else none, with "PostgreSQL: skipped (why)" printed (the smoke test reads that line)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def postgres_database(url: str | None, name: str) -> Iterator[str | None]:
    """The database's URL (None when no server could be started); a database this made is
    dropped, and its server stopped, on leaving. A PostgreSQL database keeps no key file
    beside it, so scratch data gets a pseudonym key of this run unless one is set."""
    from rrg_review.db.store import ENV_KEY

    os.environ.setdefault(ENV_KEY, secrets.token_hex(32))
    if url is not None:
        yield url
        return
    from tests.postgres_server import NoPostgres, start_server

    try:
        server = start_server()
    except NoPostgres as exc:
        print(f"PostgreSQL: skipped ({exc})")
        yield None
        return
    made = server.create_database(name)
    try:
        yield made
    finally:
        server.drop_database(made)
        server.stop()
