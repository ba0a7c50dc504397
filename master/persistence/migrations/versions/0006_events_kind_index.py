"""An index on events.kind: the ledger reads the (few) ps_restored events among many.

Revision ID: 0006
Revises: 0005
"""
from typing import Sequence, Union

from alembic import op

revision: str = "0006"
down_revision: Union[str, Sequence[str], None] = "0005"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_index("ix_events_kind", "events", ["kind"])


def downgrade() -> None:
    op.drop_index("ix_events_kind", table_name="events")
