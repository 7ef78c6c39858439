"""docs/api.md is the contract clients read: its route table must list exactly the operations of the OpenAPI
document the code generates (path parameters written `{id}`), so neither can change without the other."""

from __future__ import annotations

import re
from pathlib import Path

from app.main import create_app
from service.settings import Settings

API_DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ROW = re.compile(r"^\| (GET|POST|PUT|PATCH|DELETE) \| (/\S*?)(?:\?\S*)? \|", re.MULTILINE)
# The document itself is not one of its own operations; the dashboard's page is HTML for people, not contract.
UNDOCUMENTED_IN_OPENAPI = {("GET", "/v1/openapi.json"), ("GET", "/ui")}


def normalised(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{id}", path)


def openapi_operations(tmp_path: Path) -> set[tuple[str, str]]:
    document = create_app(Settings(data_dir=tmp_path)).openapi()
    return {(method.upper(), normalised(path)) for path, item in document["paths"].items() for method in item}


def documented_operations() -> set[tuple[str, str]]:
    return {(method, normalised(path)) for method, path in ROW.findall(API_DOC.read_text())}


def test_every_operation_of_the_openapi_document_is_in_the_route_table(tmp_path: Path) -> None:
    assert openapi_operations(tmp_path) - documented_operations() == set()


def test_every_route_in_the_table_exists(tmp_path: Path) -> None:
    assert documented_operations() - openapi_operations(tmp_path) - UNDOCUMENTED_IN_OPENAPI == set()
