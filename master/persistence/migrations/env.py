"""Alembic environment: the master runs migrations itself at start (see master/store.py).

The connection comes in `config.attributes["connection"]`; the standalone `alembic` command
works too with `-x url=...` (see docs/operations.md).
"""
from alembic import context
from sqlalchemy import create_engine

from master.persistence.schema import metadata

config = context.config


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:
        url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
            "sqlalchemy.url"
        )
        with create_engine(url).connect() as conn:
            context.configure(connection=conn, target_metadata=metadata)
            with context.begin_transaction():
                context.run_migrations()
            conn.commit()
        return
    context.configure(connection=connection, target_metadata=metadata)
    with context.begin_transaction():
        context.run_migrations()


run()
