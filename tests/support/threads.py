"""One torch intra-op thread for the small-matrix method tests: on a shared 2-core machine the second thread
turns a 100×100 matmul from ~15 µs into milliseconds (spin-waiting on a busy core). Import the fixture into a
directory's conftest.py to apply it there; the previous setting is restored after each module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def single_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
