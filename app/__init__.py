"""Parvis service: the FastAPI application (app.api), the CLI and the dashboard; its floor is `service`."""
