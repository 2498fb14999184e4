"""controlled reader studies: the study, its arms, readers, cases and readings

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25

Issue #20. A reader study is data: its design file (as given, with its hash), its arms with
their blinded codes, its readers and cases, and one row per reading (study, reader, case, arm,
session, order) allocated when the study is created. New tables only; nothing existing changes.
"""
import sqlalchemy as sa
from alembic import op

revision = '0011'
down_revision = '0010'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('reader_study',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('description', sa.Text(), server_default='', nullable=False),
    sa.Column('design', sa.String(length=16), nullable=False),
    sa.Column('sessions', sa.Integer(), nullable=False),
    sa.Column('washout_days', sa.Float(), nullable=False),
    sa.Column('seed', sa.BigInteger(), nullable=False),
    sa.Column('blinded', sa.Boolean(), nullable=False),
    sa.Column('design_text', sa.Text(), nullable=False),
    sa.Column('design_format', sa.String(length=8), nullable=False),
    sa.Column('design_sha256', sa.String(length=64), nullable=False),
    sa.Column('canonical_sha256', sa.String(length=64), nullable=False),
    sa.Column('balance', sa.JSON(), nullable=False),
    sa.Column('created_by', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("design IN ('parallel', 'crossover')", name='ck_reader_study_design'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('reader_study_arm',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('reader_study_id', sa.Integer(), nullable=False),
    sa.Column('code', sa.String(length=8), nullable=False),
    sa.Column('spec', sa.String(length=80), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('preset', sa.String(length=64), nullable=True),
    sa.Column('template', sa.Text(), nullable=True),
    sa.CheckConstraint("kind IN ('unassisted', 'draft', 'reference')",
                       name='ck_reader_study_arm_kind'),
    sa.ForeignKeyConstraint(['reader_study_id'], ['reader_study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('reader_study_id', 'code', name='uq_reader_study_arm_code'),
    sa.UniqueConstraint('reader_study_id', 'spec', name='uq_reader_study_arm_spec')
    )
    op.create_table('reader_study_reader',
    sa.Column('reader_study_id', sa.Integer(), nullable=False),
    sa.Column('reader_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['reader_id'], ['reader.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['reader_study_id'], ['reader_study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('reader_study_id', 'reader_id')
    )
    op.create_index(op.f('ix_reader_study_reader_reader_id'), 'reader_study_reader',
                    ['reader_id'], unique=False)
    op.create_table('reader_study_case',
    sa.Column('reader_study_id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['reader_study_id'], ['reader_study.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('reader_study_id', 'study_id')
    )
    op.create_index(op.f('ix_reader_study_case_study_id'), 'reader_study_case', ['study_id'],
                    unique=False)
    op.create_table('reading',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('reader_study_id', sa.Integer(), nullable=False),
    sa.Column('reader_id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('arm_id', sa.Integer(), nullable=False),
    sa.Column('session', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('opened_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('signed_at', sa.DateTime(timezone=True), nullable=True),
    sa.CheckConstraint('session >= 1 AND position >= 1', name='ck_reading_counts'),
    sa.ForeignKeyConstraint(['arm_id'], ['reader_study_arm.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['reader_id'], ['reader.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['reader_study_id'], ['reader_study.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('reader_study_id', 'reader_id', 'session', 'position',
                        name='uq_reading_order'),
    sa.UniqueConstraint('reader_study_id', 'reader_id', 'study_id', 'session',
                        name='uq_reading_case_session')
    )
    op.create_index(op.f('ix_reading_arm_id'), 'reading', ['arm_id'], unique=False)
    op.create_index(op.f('ix_reading_reader_id'), 'reading', ['reader_id'], unique=False)
    op.create_index(op.f('ix_reading_study_id'), 'reading', ['study_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_reading_study_id'), table_name='reading')
    op.drop_index(op.f('ix_reading_reader_id'), table_name='reading')
    op.drop_index(op.f('ix_reading_arm_id'), table_name='reading')
    op.drop_table('reading')
    op.drop_index(op.f('ix_reader_study_case_study_id'), table_name='reader_study_case')
    op.drop_table('reader_study_case')
    op.drop_index(op.f('ix_reader_study_reader_reader_id'), table_name='reader_study_reader')
    op.drop_table('reader_study_reader')
    op.drop_table('reader_study_arm')
    op.drop_table('reader_study')
