"""Alembic migrations (a package so `parvis db upgrade` finds them in an installed distribution)."""
