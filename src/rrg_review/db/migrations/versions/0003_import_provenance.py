"""import provenance: study time, raw split and record fingerprint; image view source;
reference report versions

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

Same-day studies need their time to be each other's prior; the split as the dataset wrote it is
kept next to the normalised one; a re-import recognises unchanged records by their fingerprint
and keeps a changed reference's old text as a numbered version.
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('study') as batch:
        batch.add_column(sa.Column('study_time', sa.Time(), nullable=True))
        batch.add_column(sa.Column('split_raw', sa.String(length=32), nullable=True))
        batch.add_column(sa.Column('fingerprint', sa.String(length=64), nullable=True))
    with op.batch_alter_table('image') as batch:
        batch.add_column(sa.Column('view_source', sa.String(length=16), nullable=True))
    with op.batch_alter_table('reference_report') as batch:
        batch.add_column(sa.Column('version', sa.Integer(), server_default='1', nullable=False))
    op.create_table('reference_report_version',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('findings', sa.Text(), nullable=True),
    sa.Column('impression', sa.Text(), nullable=True),
    sa.Column('replaced_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('study_id', 'version', name='uq_reference_version')
    )


def downgrade() -> None:
    op.drop_table('reference_report_version')
    with op.batch_alter_table('reference_report') as batch:
        batch.drop_column('version')
    with op.batch_alter_table('image') as batch:
        batch.drop_column('view_source')
    with op.batch_alter_table('study') as batch:
        batch.drop_column('fingerprint')
        batch.drop_column('split_raw')
        batch.drop_column('study_time')
