"""One migration history that upgrades empty SQLite and PostgreSQL, matches the models, and round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import inspect

from service.db import make_engine
from service.migrate import alembic_config
from service.models import Base
from tests.support.stack import PostgresDatabase

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    database = PostgresDatabase()
    try:
        yield database.url
    finally:
        database.drop()


def test_upgrade_check_downgrade_upgrade(database_url: str) -> None:
    config = alembic_config(database_url)
    command.upgrade(config, "head")
    command.check(config)  # models and migrations agree
    engine = make_engine(database_url)
    assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    command.downgrade(config, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    command.upgrade(config, "head")
    assert set(inspect(engine).get_table_names()) >= set(Base.metadata.tables)
    engine.dispose()
