"""metric results hold the per-pair payload (JSON) instead of one float; whole-list matrices

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

Corpus-level metrics (BLEU-4 counts, CheXbert labels) need more than one number per pair to be
aggregated and bootstrapped from the cache. No release ever wrote metric_result, so the table is
recreated.
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_table('metric_result')
    op.create_table('metric_result',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('model_id', sa.String(length=255), nullable=False),
    sa.Column('hyp_hash', sa.String(length=64), nullable=False),
    sa.Column('ref_hash', sa.String(length=64), nullable=False),
    sa.Column('payload', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('metric', 'version', 'model_id', 'hyp_hash', 'ref_hash', name='uq_metric_result_key')
    )
    op.create_table('metric_corpus',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('model_id', sa.String(length=255), nullable=False),
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('matrix', sa.LargeBinary(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('metric', 'version', 'model_id', 'digest', name='uq_metric_corpus_key')
    )


def downgrade() -> None:
    op.drop_table('metric_corpus')
    op.drop_table('metric_result')
    op.create_table('metric_result',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('version', sa.String(length=64), nullable=False),
    sa.Column('model_id', sa.String(length=255), nullable=False),
    sa.Column('hyp_hash', sa.String(length=64), nullable=False),
    sa.Column('ref_hash', sa.String(length=64), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('metric', 'version', 'model_id', 'hyp_hash', 'ref_hash', name='uq_metric_result_key')
    )
