"""Single-threaded torch for these tests (see tests/support/threads.py)."""

from tests.support.threads import single_torch_thread  # noqa: F401  (autouse fixture)
