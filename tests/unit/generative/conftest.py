"""One intra-op thread for these small problems: with several threads on a shared, loaded CPU the tiny
matmuls of these tests spend most of their time synchronising. Restored after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def single_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
