"""docker-compose.yml cannot be brought up here (no Docker daemon, no image registry), so what can drift is
checked statically: every PARVIS_ variable it sets is a setting the service reads, the settings it builds
validate, and every `parvis` command it runs parses with the real command line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli import build_parser
from service.settings import Settings

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
INTERPOLATION = re.compile(r"\$\{(\w+)(?::[-?]([^}]*))?\}")


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def resolved(value: Any) -> str:
    """Compose's `${VAR:-default}` → default; `${VAR:?message}` (required) → a placeholder value."""
    return INTERPOLATION.sub(lambda m: "set-by-operator" if ":?" in m.group(0) else (m.group(2) or ""), str(value))


def parvis_environment() -> dict[str, str]:
    return {name: resolved(value) for name, value in compose()["x-parvis-env"].items()}


def test_every_variable_is_a_setting_the_service_reads() -> None:
    fields = set(Settings.model_fields)
    unknown = [name for name in parvis_environment() if name.removeprefix("PARVIS_").lower() not in fields]
    assert unknown == []


def test_the_compose_environment_builds_valid_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in parvis_environment().items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.database_url.startswith("postgresql+psycopg://") and settings.broker_url.startswith("redis://")
    assert settings.auth_enabled


def test_every_service_command_parses() -> None:
    commands = [service["command"] for service in compose()["services"].values()
                if service.get("command", [None])[0] == "parvis"]
    assert len(commands) >= 3  # migrate, api, worker
    for command in commands:
        build_parser().parse_args(command[1:])
    header = [line for line in COMPOSE.read_text().splitlines() if "parvis keys" in line]
    for line in header:  # the documented key command in the file's header
        build_parser().parse_args(line.split("parvis", 1)[1].split())
