"""Pydantic schemas for everything a JobSpec may contain. Torch-free: the API imports these to validate."""
