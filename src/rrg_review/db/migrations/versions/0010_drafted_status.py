"""worklist_item.status: studies with a draft are 'drafted' for every reader

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23

A reader whose worklist was made after pre-drafting got every study as 'new', drafts in the
boxes notwithstanding (drafts belong to the study, not to a reader), so a "drafted" filter hid
them. New worklists now start as 'drafted' where a draft exists; this puts the worklists made
before right. The progress triggers of 0007 count the change. No schema change.
"""
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "UPDATE worklist_item SET status = 'drafted' WHERE status = 'new' AND EXISTS "
        "(SELECT 1 FROM draft WHERE draft.study_id = worklist_item.study_id "
        "AND draft.error IS NULL)")


def downgrade() -> None:
    pass  # 'drafted' is what those studies are; nothing to undo
