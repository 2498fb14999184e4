"""worklists at dataset scale: natural sort key and image count on study, worklist indexes

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23

Paging, filtering and counting a 160,000-study worklist must be single indexed queries. The
natural sort key (CXR2 before CXR10) and the number of images (0 for report-only references) are
stored on the study and back-filled here for existing rows; study and patient keys are indexed
for prefix search.
"""
import re

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

_RUN = re.compile(r"\d+")


def _natural_key(text):
    # a frozen copy of db.sorting.natural_key as of this revision
    def pad(match):
        return (match.group(0).lstrip("0") or "0").rjust(12, "0")
    return _RUN.sub(pad, (text or "").lower())[:255]


def upgrade() -> None:
    with op.batch_alter_table('study', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sort_key', sa.String(length=255), server_default='',
                                      nullable=False))
        batch_op.add_column(sa.Column('image_count', sa.Integer(), server_default='0',
                                      nullable=False))
        batch_op.create_index('ix_study_source_sort', ['source', 'sort_key', 'id'], unique=False)
        batch_op.create_index('ix_study_key', ['study_key'], unique=False)
    with op.batch_alter_table('patient', schema=None) as batch_op:
        batch_op.create_index('ix_patient_key', ['key'], unique=False)
    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, study_key FROM study")).fetchall()
    if rows:
        conn.execute(sa.text("UPDATE study SET sort_key = :k WHERE id = :i"),
                     [{"k": _natural_key(key), "i": sid} for sid, key in rows])
        conn.execute(sa.text("UPDATE study SET image_count = (SELECT count(*) FROM image "
                             "WHERE image.study_id = study.id)"))
    with op.batch_alter_table('worklist_item', schema=None) as batch_op:
        batch_op.create_index('ix_worklist_reader_position', ['reader_id', 'position'],
                              unique=False)
        batch_op.create_index('ix_worklist_reader_status', ['reader_id', 'status', 'position'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('worklist_item', schema=None) as batch_op:
        batch_op.drop_index('ix_worklist_reader_status')
        batch_op.drop_index('ix_worklist_reader_position')
    with op.batch_alter_table('patient', schema=None) as batch_op:
        batch_op.drop_index('ix_patient_key')
    with op.batch_alter_table('study', schema=None) as batch_op:
        batch_op.drop_index('ix_study_key')
        batch_op.drop_index('ix_study_source_sort')
        batch_op.drop_column('image_count')
        batch_op.drop_column('sort_key')
