from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.serve import ServedParvis
from tests.support.stack import Stack

MODES = ["embedded", "cluster"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Schemathesis gives its items, one per API operation, one node id between them (the operation is in the
    name only). pytest-xdist, which scripts/test runs, schedules by node id and ran one operation of the 26:
    each gets its operation in its id."""
    for item in items:
        if "[" in item.name and "[" not in item.nodeid:
            unique = item.nodeid + item.name[item.name.index("["):]
            if hasattr(item, "_id"):  # pytest 9 keeps the id structured; before, the string
                from _pytest.nodes import coerce_node_id

                item._id = coerce_node_id(unique)
            else:
                item._nodeid = unique


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Function-scoped stacks (for tests that kill workers); started stacks are stopped afterwards."""
    stacks: list[Stack] = []

    def factory(mode: str, **extra_env: str) -> Stack:
        stack = Stack(mode, tmp_path / f"{mode}-{len(stacks)}", extra_env)
        stacks.append(stack)
        stack.migrate()
        stack.start_api()
        return stack

    yield factory
    for stack in stacks:
        stack.stop()


@pytest.fixture(scope="module", params=MODES)
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One running deployment (API + one worker) per mode, shared by a module's tests."""
    mode = request.param
    service = Stack(mode, tmp_path_factory.mktemp(mode))
    try:
        service.migrate()
        service.start_api()
        service.start_worker()
        yield service
    except BaseException:
        print(service.log_tail())
        raise
    finally:
        service.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedParvis]:
    """`parvis serve` (embedded) spawned in a temp data directory, shared by a module's tests; at most two
    event streams per tenant, so a test can fill them and see a client fall back to polling."""
    service = ServedParvis(tmp_path_factory.mktemp("served"), PARVIS_MAX_STREAMS_PER_TENANT="2")
    try:
        service.wait_ready()
        yield service
    finally:
        service.stop()
