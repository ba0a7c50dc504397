"""PS replicas: each index's generation and primary process, and its backups.

Revision ID: 0005
Revises: 0004
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: Union[str, Sequence[str], None] = "0004"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "ps_generations",
        sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("instance", sa.String(64), nullable=False),
    )
    op.create_table(
        "ps_backups",
        sa.Column("instance", sa.String(64), primary_key=True),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("address", sa.String(256), nullable=False),
        sa.Column("data_address", sa.String(256), nullable=False),
        sa.Column("data_public_key", sa.String(40), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("registered_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ps_backups")
    op.drop_table("ps_generations")
