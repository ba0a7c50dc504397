"""Durable state: how the core's decisions reach the database and come back after a restart.

`journal` (where the core writes a call's changes), `batch` (the row changes one transaction
commits), `committer` (group commit: a call is answered once its changes are durable), `store`
(SQLAlchemy: migrations, `load`, `apply`), `snapshot` (what `load` hands the core), `schema`
(the tables) and `migrations/` (alembic, run by the store at start).
"""
