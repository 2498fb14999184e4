"""Alembic environment: runs on the connection handed over by db.engine.upgrade_schema."""

from alembic import context
from sqlalchemy import Connection, create_engine

from rrg_review.db.models import Base

config = context.config
target_metadata = Base.metadata


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:  # plain `alembic` CLI use
        url = config.get_main_option("sqlalchemy.url")
        if url is None:
            raise RuntimeError("alembic.ini names no sqlalchemy.url")
        engine = create_engine(url)
        with engine.begin() as connection:
            _run_on(connection)
        return
    _run_on(connection)


def _run_on(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


run()
