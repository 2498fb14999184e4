"""a reading is the unit: revisions and ratings of a reading, and its timing

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-25

Issue #20. A case read in two sessions of a reader study keeps two histories: `revision` and
`rating` get a nullable `reading_id` (NULL: reading outside studies, as before; their numbers
stay one sequence per reader, case and section, so the unique keys are unchanged). `reading`
gets its own active time (`active_seconds`, `active_until`: the review screen's rule), and
`reading_section` holds per section the draft on screen, first and last keystroke, and the
counts of keystroke events and edit operations (no keystroke text).
"""
import sqlalchemy as sa
from alembic import op

revision = '0012'
down_revision = '0011'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch: SQLite cannot add a foreign key by ALTER; it copies these two tables (they carry
    # no triggers); PostgreSQL alters them in place
    for table in ('revision', 'rating'):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('reading_id', sa.Integer(), nullable=True))
            batch.create_index(op.f(f'ix_{table}_reading_id'), ['reading_id'], unique=False)
            batch.create_foreign_key(op.f(f'fk_{table}_reading_id_reading'), 'reading',
                                     ['reading_id'], ['id'], ondelete='CASCADE')
    op.add_column('reading', sa.Column('active_seconds', sa.Float(), server_default='0',
                                       nullable=False))
    op.add_column('reading', sa.Column('active_until', sa.Float(), nullable=True))
    op.create_table('reading_section',
    sa.Column('reading_id', sa.Integer(), nullable=False),
    sa.Column('section', sa.String(length=16), nullable=False),
    sa.Column('draft_id', sa.Integer(), nullable=True),
    sa.Column('first_keystroke_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_keystroke_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('keystrokes', sa.Integer(), server_default='0', nullable=False),
    sa.Column('edits', sa.Integer(), server_default='0', nullable=False),
    sa.CheckConstraint("section IN ('findings', 'impression')",
                       name='ck_reading_section_section'),
    sa.CheckConstraint('keystrokes >= 0 AND edits >= 0', name='ck_reading_section_counts'),
    sa.ForeignKeyConstraint(['draft_id'], ['draft.id'], ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['reading_id'], ['reading.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('reading_id', 'section')
    )


def downgrade() -> None:
    op.drop_table('reading_section')
    op.drop_column('reading', 'active_until')
    op.drop_column('reading', 'active_seconds')
    for table in ('rating', 'revision'):
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(op.f(f'fk_{table}_reading_id_reading'), type_='foreignkey')
            batch.drop_index(op.f(f'ix_{table}_reading_id'))
            batch.drop_column('reading_id')
