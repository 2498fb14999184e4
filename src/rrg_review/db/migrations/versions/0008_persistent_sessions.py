"""web sessions and login throttling kept in the database

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23

Sessions (only a SHA-256 of each cookie token) and the failed-login counters of the back-off
were held in the app's memory: a restart signed every reader out and reset the throttle. Both
now live here, with wall-clock times, so expiry, logout and back-off survive restarts and hold
across app processes sharing one database.
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('web_session',
    sa.Column('token_hash', sa.String(length=64), nullable=False),
    sa.Column('reader_id', sa.Integer(), nullable=False),
    sa.Column('created_s', sa.Float(), nullable=False),
    sa.Column('seen_s', sa.Float(), nullable=False),
    sa.ForeignKeyConstraint(['reader_id'], ['reader.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('token_hash')
    )
    op.create_index('ix_web_session_reader', 'web_session', ['reader_id'], unique=False)
    op.create_table('login_throttle',
    sa.Column('key', sa.String(length=160), nullable=False),
    sa.Column('failures', sa.Integer(), nullable=False),
    sa.Column('not_before_s', sa.Float(), nullable=False),
    sa.Column('last_failure_s', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )
    op.create_index('ix_login_throttle_last_failure', 'login_throttle', ['last_failure_s'],
                    unique=False)


def downgrade() -> None:
    op.drop_index('ix_login_throttle_last_failure', table_name='login_throttle')
    op.drop_table('login_throttle')
    op.drop_index('ix_web_session_reader', table_name='web_session')
    op.drop_table('web_session')
