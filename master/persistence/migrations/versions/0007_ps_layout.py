"""The PS layout: the job's hash slots, each index's slot ranges, the pending slot moves.

Revision ID: 0007
Revises: 0006
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: Union[str, Sequence[str], None] = "0006"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # A database of an older version has PS rows but no layout: the master adopts them at its
    # next start (master/ps/layout.py), with its --ps-slots.
    op.create_table(
        "ps_layout",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ps_slots", sa.Integer, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
        sa.Column("num_ps", sa.Integer, nullable=False),
        sa.Column("target_num_ps", sa.Integer, nullable=False),
        sa.Column("moves_planned", sa.Integer, nullable=False),
        sa.Column("resize_started_ms", sa.BigInteger, nullable=False),
        sa.Column("changed_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "ps_slot_ranges",
        sa.Column("idx", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("ranges", sa.Text, nullable=False),
    )
    op.create_table(
        "ps_slot_moves",
        sa.Column("slot", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("src", sa.Integer, nullable=False),
        sa.Column("dst", sa.Integer, nullable=False),
        sa.Column("phase", sa.String(16), nullable=False),
        sa.Column("planned_ms", sa.BigInteger, nullable=False),
        sa.Column("changed_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ps_slot_moves")
    op.drop_table("ps_slot_ranges")
    op.drop_table("ps_layout")
