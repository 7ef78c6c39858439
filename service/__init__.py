"""The floor the API (`app`) and the workers (`workers`) both stand on: settings, logging, the database models,
engine and migrations' runner, the artifact store, the queue, job state, and the tenant-scoped repositories.
Torch-free: it imports neither `app`, `workers` nor torch (tests/unit/test_layering.py)."""
