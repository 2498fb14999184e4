"""worklist_item.active_until: the wall-clock end of the active time already counted

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23

Every open tab beat its own active time, so a reader with a study open in three tabs was
credited about three times the time on task. A beat now stands for a wall-clock interval and
adds only the part after `active_until`, so overlapping beats (tabs, app processes sharing the
database) count once. NULL until the first beat after this migration.
"""
import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('worklist_item', sa.Column('active_until', sa.Float(), nullable=True))


def downgrade() -> None:
    # a plain ALTER TABLE ... DROP COLUMN (SQLite >= 3.35): batch mode would copy the table
    # and lose 0007's progress triggers
    op.drop_column('worklist_item', 'active_until')
