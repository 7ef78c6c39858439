"""Test helpers: real service processes (uvicorn API, Celery workers) and real PostgreSQL/Redis."""
