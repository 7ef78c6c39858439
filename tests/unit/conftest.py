from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from service.migrate import upgrade
from service.settings import Settings


@pytest.fixture
def make_client(tmp_path: Path) -> Iterator[Callable[..., tuple[TestClient, Settings]]]:
    """The real app on a fresh SQLite database and filesystem broker (no worker): in-process HTTP."""
    clients: list[TestClient] = []

    def factory(**overrides: object) -> tuple[TestClient, Settings]:
        settings = Settings(data_dir=tmp_path / f"data{len(clients)}", **overrides)
        upgrade(settings.database_url)
        client = TestClient(create_app(settings), raise_server_exceptions=False)
        client.__enter__()
        clients.append(client)
        return client, settings

    yield factory
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client) -> TestClient:
    return make_client()[0]
