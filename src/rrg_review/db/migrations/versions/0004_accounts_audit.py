"""reader roles (reader/admin) and the audit table (who, what, when, from where)

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

Every existing account becomes a plain `reader`; `rrg-review readers add NAME --admin` makes
admins. The audit table is append-only: logins, failed logins, saves, ratings and exports.
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('reader') as batch:
        batch.add_column(sa.Column('role', sa.String(length=16), nullable=False,
                                   server_default='reader'))
        batch.create_check_constraint('ck_reader_role', "role IN ('reader', 'admin')")
    # the login-free local reader is whoever sits at the machine running the app
    op.execute("UPDATE reader SET role = 'admin' WHERE name = 'local' AND password_hash IS NULL")
    op.create_table('audit_event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('actor', sa.String(length=64), nullable=True),
    sa.Column('action', sa.String(length=32), nullable=False),
    sa.Column('target', sa.String(length=255), nullable=True),
    sa.Column('address', sa.String(length=64), nullable=True),
    sa.Column('ok', sa.Boolean(), nullable=False),
    sa.Column('detail', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_audit_event_at', 'audit_event', ['at'], unique=False)
    op.create_index('ix_audit_event_actor', 'audit_event', ['actor'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_audit_event_actor', table_name='audit_event')
    op.drop_index('ix_audit_event_at', table_name='audit_event')
    op.drop_table('audit_event')
    with op.batch_alter_table('reader') as batch:
        batch.drop_constraint('ck_reader_role', type_='check')
        batch.drop_column('role')
