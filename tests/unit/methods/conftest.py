"""Method tests run single-threaded: on a shared 2-core machine, torch's second intra-op thread turns a
100×100 matmul from ~15 µs into milliseconds (spin-waiting on a busy core). Restored after each module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _single_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
