"""Tenant-scoped repositories: the only code that speaks SQL for the routes. Each is built per request from a
session and the caller's tenant, and every query it makes is filtered to that tenant: another tenant's object
is as missing as an unknown one. They raise `service.errors` domain errors (app/api/problems.py maps them)."""

from service.repositories.datasets import Datasets
from service.repositories.jobs import Jobs
from service.repositories.pages import Cursor, Page
from service.repositories.samplers import Samplers

__all__ = ["Cursor", "Datasets", "Jobs", "Page", "Samplers"]
