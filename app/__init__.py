"""Parvis service: FastAPI routes (app.api) and the data layer shared with workers (app.data)."""
