"""Alembic migrations (a package so `parvis db upgrade` finds them in an installed distribution); they import
`service` (models, engine, settings), never `app`."""
