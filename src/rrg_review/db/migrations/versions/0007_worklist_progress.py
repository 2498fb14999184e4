"""per reader and status: how many worklist entries, kept by triggers in the status change's
transaction

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23

The progress line ("1,204 / 160,000 done") was a GROUP BY over the reader's whole worklist on
every page, about 6x the 1,000-study cost at 160,000 studies. `worklist_progress` holds one
row per (reader, status) with its count; database triggers on `worklist_item` (insert, delete,
a change of status or reader) keep it, inside the same transaction as the change, whatever
code path writes the item (the ORM, a bulk INSERT ... SELECT, a cascade delete). Reading
progress is then four rows of a primary-key index. Existing worklists are counted once here.

The triggers are part of the schema and live only here (the ORM has no notion of triggers);
a later migration that rebuilds `worklist_item` (SQLite batch mode copies the table) must
create them again: tests/test_worklist.py checks the counts at head.
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

_UP = ("INSERT INTO worklist_progress (reader_id, status, count) VALUES ({r}, {s}, 1) "
       "ON CONFLICT (reader_id, status) DO UPDATE SET count = worklist_progress.count + 1")
# a count that reaches 0 leaves no row: the table is a pure function of worklist_item (a copy
# rebuilt by the triggers, as migrate-db makes, holds the same rows)
_DOWN = ("UPDATE worklist_progress SET count = count - 1 "
         "WHERE reader_id = {r} AND status = {s}; "
         "DELETE FROM worklist_progress WHERE reader_id = {r} AND status = {s} AND count <= 0")

SQLITE = [
    "CREATE TRIGGER worklist_progress_insert AFTER INSERT ON worklist_item BEGIN "
    + _UP.format(r="NEW.reader_id", s="NEW.status") + "; END",
    "CREATE TRIGGER worklist_progress_delete AFTER DELETE ON worklist_item BEGIN "
    + _DOWN.format(r="OLD.reader_id", s="OLD.status") + "; END",
    "CREATE TRIGGER worklist_progress_update AFTER UPDATE OF status, reader_id ON worklist_item "
    "WHEN OLD.status IS NOT NEW.status OR OLD.reader_id IS NOT NEW.reader_id BEGIN "
    + _DOWN.format(r="OLD.reader_id", s="OLD.status") + "; "
    + _UP.format(r="NEW.reader_id", s="NEW.status") + "; END",
]
POSTGRESQL = [
    "CREATE FUNCTION worklist_progress_count() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP IN ('UPDATE', 'DELETE') THEN "
    + _DOWN.format(r="OLD.reader_id", s="OLD.status") + "; END IF; "
    "IF TG_OP IN ('UPDATE', 'INSERT') THEN "
    + _UP.format(r="NEW.reader_id", s="NEW.status") + "; END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER worklist_progress_insert_delete AFTER INSERT OR DELETE ON worklist_item "
    "FOR EACH ROW EXECUTE FUNCTION worklist_progress_count()",
    "CREATE TRIGGER worklist_progress_update AFTER UPDATE OF status, reader_id ON worklist_item "
    "FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status "
    "OR OLD.reader_id IS DISTINCT FROM NEW.reader_id) "
    "EXECUTE FUNCTION worklist_progress_count()",
]


def upgrade() -> None:
    op.create_table('worklist_progress',
    sa.Column('reader_id', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('count', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['reader_id'], ['reader.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('reader_id', 'status')
    )
    conn = op.get_bind()
    conn.execute(sa.text(
        "INSERT INTO worklist_progress (reader_id, status, count) "
        "SELECT reader_id, status, count(*) FROM worklist_item GROUP BY reader_id, status"))
    for statement in POSTGRESQL if conn.dialect.name == "postgresql" else SQLITE:
        conn.execute(sa.text(statement))


def downgrade() -> None:
    conn = op.get_bind()
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("DROP TRIGGER worklist_progress_update ON worklist_item"))
        conn.execute(sa.text("DROP TRIGGER worklist_progress_insert_delete ON worklist_item"))
        conn.execute(sa.text("DROP FUNCTION worklist_progress_count()"))
    else:
        for name in ("insert", "delete", "update"):
            conn.execute(sa.text(f"DROP TRIGGER worklist_progress_{name}"))
    op.drop_table('worklist_progress')
