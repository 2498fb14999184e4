"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('meta',
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )
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
    op.create_table('patient',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=64), nullable=False),
    sa.Column('key', sa.String(length=128), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('source', 'key', name='uq_patient_source_key')
    )
    op.create_table('reader',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('password_hash', sa.String(length=255), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('study',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('patient_id', sa.Integer(), nullable=False),
    sa.Column('source', sa.String(length=64), nullable=False),
    sa.Column('study_key', sa.String(length=128), nullable=False),
    sa.Column('study_date', sa.Date(), nullable=True),
    sa.Column('split', sa.String(length=32), nullable=True),
    sa.Column('indication', sa.Text(), nullable=True),
    sa.Column('comparison', sa.Text(), nullable=True),
    sa.Column('demographics', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['patient_id'], ['patient.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('source', 'study_key', name='uq_study_source_key')
    )
    with op.batch_alter_table('study', schema=None) as batch_op:
        batch_op.create_index('ix_study_patient_date', ['patient_id', 'study_date'], unique=False)
        batch_op.create_index(batch_op.f('ix_study_source'), ['source'], unique=False)
        batch_op.create_index(batch_op.f('ix_study_split'), ['split'], unique=False)

    op.create_table('draft',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('section', sa.String(length=16), nullable=False),
    sa.Column('preset', sa.String(length=64), nullable=False),
    sa.Column('text', sa.Text(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('model_id', sa.String(length=255), nullable=False),
    sa.Column('model_revision', sa.String(length=64), nullable=True),
    sa.Column('generation', sa.JSON(), nullable=False),
    sa.Column('device', sa.String(length=32), nullable=True),
    sa.Column('dtype', sa.String(length=16), nullable=True),
    sa.Column('seconds', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("section IN ('findings', 'impression')", name='ck_draft_section'),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('draft', schema=None) as batch_op:
        batch_op.create_index('ix_draft_study_preset', ['study_id', 'preset', 'section'], unique=False)

    op.create_table('image',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('uri', sa.Text(), nullable=False),
    sa.Column('format', sa.String(length=8), nullable=False),
    sa.Column('view_position', sa.String(length=32), nullable=True),
    sa.Column('view_group', sa.String(length=8), nullable=True),
    sa.Column('laterality', sa.String(length=8), nullable=True),
    sa.Column('body_part', sa.String(length=32), nullable=True),
    sa.Column('rows', sa.Integer(), nullable=False),
    sa.Column('cols', sa.Integer(), nullable=False),
    sa.Column('photometric', sa.String(length=16), nullable=False),
    sa.Column('bits_stored', sa.Integer(), nullable=False),
    sa.Column('checksum', sa.String(length=64), nullable=False),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('study_id', 'position', name='uq_image_study_position')
    )
    with op.batch_alter_table('image', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_image_checksum'), ['checksum'], unique=False)
        batch_op.create_index(batch_op.f('ix_image_study_id'), ['study_id'], unique=False)

    op.create_table('rating',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('reader_id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('preset', sa.String(length=64), nullable=True),
    sa.Column('likert', sa.Integer(), nullable=True),
    sa.Column('acceptable', sa.Boolean(), nullable=True),
    sa.Column('errors', sa.JSON(), nullable=False),
    sa.Column('comment', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint('likert IS NULL OR likert BETWEEN 1 AND 5', name='ck_rating_likert'),
    sa.ForeignKeyConstraint(['reader_id'], ['reader.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('reader_id', 'study_id', 'number', name='uq_rating_seq')
    )
    op.create_table('reference_report',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('findings', sa.Text(), nullable=True),
    sa.Column('impression', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('study_id')
    )
    op.create_table('worklist_item',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('reader_id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('active_seconds', sa.Float(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("status IN ('new', 'drafted', 'in_review', 'done')", name='ck_worklist_status'),
    sa.ForeignKeyConstraint(['reader_id'], ['reader.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('reader_id', 'study_id', name='uq_worklist_reader_study')
    )
    op.create_table('revision',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('reader_id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('section', sa.String(length=16), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('draft_id', sa.Integer(), nullable=True),
    sa.Column('autosave', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("section IN ('findings', 'impression')", name='ck_revision_section'),
    sa.ForeignKeyConstraint(['draft_id'], ['draft.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['reader_id'], ['reader.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('reader_id', 'study_id', 'section', 'number', name='uq_revision_seq')
    )


def downgrade() -> None:
    op.drop_table('revision')
    op.drop_table('worklist_item')
    op.drop_table('reference_report')
    op.drop_table('rating')
    with op.batch_alter_table('image', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_image_study_id'))
        batch_op.drop_index(batch_op.f('ix_image_checksum'))

    op.drop_table('image')
    with op.batch_alter_table('draft', schema=None) as batch_op:
        batch_op.drop_index('ix_draft_study_preset')

    op.drop_table('draft')
    with op.batch_alter_table('study', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_study_split'))
        batch_op.drop_index(batch_op.f('ix_study_source'))
        batch_op.drop_index('ix_study_patient_date')

    op.drop_table('study')
    op.drop_table('reader')
    op.drop_table('patient')
    op.drop_table('metric_result')
    op.drop_table('meta')
