"""Parvis for people: the HTTP client (`Client`, `AsyncClient`), the client commands of the `parvis` CLI,
offline sampling (`load_sampler`) and ArviZ export. Imports no torch (see clients/python/README.md)."""

from parvis.client import AsyncClient, Client, SamplerHandle
from parvis.errors import (
    AuthenticationError,
    BadRequestError,
    ConflictError,
    ConnectionFailedError,
    JobCancelledError,
    JobFailedError,
    NotFoundError,
    ParvisError,
    PermissionDeniedError,
    RateLimitError,
    ServerError,
    ServiceUnavailableError,
    ValidationError,
    WaitTimeoutError,
)
from parvis.export import save_draws, to_inference_data
from parvis.offline import load_sampler

__version__ = "0.1.0"
__all__ = [
    "AsyncClient", "AuthenticationError", "BadRequestError", "Client", "ConflictError", "ConnectionFailedError",
    "JobCancelledError", "JobFailedError", "NotFoundError", "ParvisError", "PermissionDeniedError",
    "RateLimitError", "SamplerHandle", "ServerError", "ServiceUnavailableError", "ValidationError",
    "WaitTimeoutError", "load_sampler", "save_draws", "to_inference_data",
]
