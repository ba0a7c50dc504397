"""The job a master drives (issue 39): its spec, state, policy state and targets, and every
process launched for it (where it runs, how it ended).

Revision ID: 0008
Revises: 0007
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: Union[str, Sequence[str], None] = "0007"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    # a master started without a job spec writes no row: both tables stay empty
    op.create_table(
        "job",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_ms", sa.BigInteger, nullable=False),
        sa.Column("changed_ms", sa.BigInteger, nullable=False),
        sa.Column("policy", sa.Text, nullable=False),
        sa.Column("targets", sa.Text, nullable=False),
        sa.Column("decisions", sa.Text, nullable=False),
        sa.Column("launches", sa.BigInteger, nullable=False),
        sa.Column("masters", sa.Text, nullable=False),
    )
    op.create_table(
        "job_processes",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("market", sa.String(64), nullable=False),
        sa.Column("slot", sa.Integer, nullable=False),
        sa.Column("engine_id", sa.String(128), nullable=False),
        sa.Column("log", sa.String(1024), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("launched_ms", sa.BigInteger, nullable=False),
        sa.Column("ended_ms", sa.BigInteger, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("cause", sa.String(64), nullable=False),
        sa.Index("ix_job_processes_state", "state"),
    )


def downgrade() -> None:
    op.drop_table("job_processes")
    op.drop_table("job")
