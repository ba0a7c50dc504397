"""Alembic environment: the master runs migrations itself at start (see
master/persistence/store.py).

The connection comes in `config.attributes["connection"]`; the standalone `alembic` command
works too, given an ini whose `script_location` is this folder and `-x url=...`:
`alembic -c my.ini -x url=sqlite:///master.db upgrade head`.
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
