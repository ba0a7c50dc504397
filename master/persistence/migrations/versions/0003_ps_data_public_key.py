"""The PS registry keeps each PS's data-plane CURVE public key (empty: plaintext).

Revision ID: 0003
Revises: 0002
"""
from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: Union[str, Sequence[str], None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("ps") as batch:
        batch.add_column(sa.Column("data_public_key", sa.String(40), nullable=False,
                                   server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("ps") as batch:
        batch.drop_column("data_public_key")
