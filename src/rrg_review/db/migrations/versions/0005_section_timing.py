"""per reader, study and section: first/last keystroke, submit time, draft on screen at start

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23

"Time with vs without a draft" has to mean what the reader saw: the first keystroke records
whether a model draft was on screen then. Submit time is the last explicit save of the section.
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('section_timing',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('reader_id', sa.Integer(), nullable=False),
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('section', sa.String(length=16), nullable=False),
    sa.Column('first_keystroke_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_keystroke_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('submitted_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('draft_on_screen', sa.Boolean(), nullable=True),
    sa.CheckConstraint("section IN ('findings', 'impression')", name='ck_section_timing_section'),
    sa.ForeignKeyConstraint(['reader_id'], ['reader.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['study_id'], ['study.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('reader_id', 'study_id', 'section', name='uq_section_timing')
    )


def downgrade() -> None:
    op.drop_table('section_timing')
