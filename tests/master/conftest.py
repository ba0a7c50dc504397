from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_ENV = "ELASTIC_PS_TEST_PG_URL"


@pytest.fixture
def pg_url():
    """A fresh PostgreSQL database for one test, dropped afterwards.

    Skipped, with the reason printed, only outside CI when no server is configured; in CI
    (CI=true) a missing server is a failure, never a silent skip.
    """
    base = os.environ.get(PG_ENV)
    if not base:
        message = (f"no PostgreSQL server: set {PG_ENV}=postgresql+psycopg://USER@HOST/DB "
                   "(scripts/start_postgres.sh starts one)")
        if os.environ.get("CI"):
            pytest.fail(message + " -- CI must run the PostgreSQL tests")
        pytest.skip(message)
    name = f"eps_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
