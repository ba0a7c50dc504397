"""Tell records that may be trained twice from records merely handed out again.

Revision ID: 0002
Revises: 0001
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: Union[str, Sequence[str], None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # existing rows: every earlier re-hand-out was counted as redone, so rehanded = redone
    with op.batch_alter_table("epochs") as batch:
        batch.add_column(sa.Column("records_rehanded", sa.BigInteger(), nullable=False,
                                   server_default="0"))
    op.execute("UPDATE epochs SET records_rehanded = records_redone")
    with op.batch_alter_table("leases") as batch:
        batch.add_column(sa.Column("redo", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    op.execute("UPDATE leases SET redo = (handout > 1)")
    with op.batch_alter_table("pieces") as batch:
        batch.add_column(sa.Column("redo", sa.Boolean(), nullable=False,
                                   server_default=sa.false()))
    op.execute("UPDATE pieces SET redo = TRUE")


def downgrade() -> None:
    for table, column in (("pieces", "redo"), ("leases", "redo"), ("epochs", "records_rehanded")):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(column)
