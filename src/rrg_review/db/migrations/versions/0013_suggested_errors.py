"""the ReXVal counts suggested from the reader's edit, beside the counts they confirmed

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25

Issue #22. The rating panel pre-fills the ReXVal boxes from what the reader changed in the draft
(`metrics.findings.suggest`); a suggestion is never the reader's rating until they confirm it.
`rating.suggested` keeps what was suggested when the rating was submitted ({category: count},
every category, 0 included), so the export can report agreement between suggestions and
readers' confirmed counts (`rating.errors`). NULL: no suggestion was made (a rating from before
this revision, an accepted draft); an edit that changed no finding stores every count as 0.
A plain nullable column: SQLite adds it by ALTER TABLE without copying the table.
"""
import sqlalchemy as sa
from alembic import op

revision = '0013'
down_revision = '0012'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column('rating', sa.Column('suggested', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('rating') as batch:
        batch.drop_column('suggested')
