"""docs/tutorial.md's Python blocks stay valid without a service: they parse, every route they call is one the API
serves with that HTTP method, and every method, target kind and literal option set they name is accepted by the
catalog. (tests/integration/test_tutorial.py runs them against a real service.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from app.main import create_app
from benchmarks.tutorial_figures import TUTORIAL, python_blocks
from inference_core.catalog import METHODS, TARGET_KINDS
from service.settings import Settings

CALL = re.compile(r"""api\.(get|post|delete)\(\s*f?"(/v1/[^"]*)\"""")


@pytest.fixture(scope="module")
def blocks() -> list[str]:
    found = python_blocks(TUTORIAL)
    assert len(found) >= 4, "the tutorial's Python blocks were not found"
    return found


@pytest.fixture(scope="module")
def trees(blocks: list[str]) -> list[ast.Module]:
    return [ast.parse(block) for block in blocks]


def template(path: str) -> str:
    """'/v1/jobs/{job['id']}/predict' and '/v1/jobs/{job_id}/predict' both → '/v1/jobs/{}/predict'."""
    return re.sub(r"\{[^/]*\}", "{}", path)


def test_the_client_block_parses_and_uses_the_tutorials_variables(blocks: list[str]) -> None:
    (client_block,) = python_blocks(TUTORIAL, fence="py")
    used = {node.id for node in ast.walk(ast.parse(client_block)) if isinstance(node, ast.Name)}
    defined = {node.id for block in blocks for node in ast.walk(ast.parse(block))
               if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    assert {"URL", "banana", "bnn", "grid"} <= used & defined


def test_every_route_called_is_served_with_that_method(blocks: list[str], tmp_path: Path) -> None:
    paths = create_app(Settings(data_dir=tmp_path)).openapi()["paths"]
    served = {(template(path), method.upper()) for path, item in paths.items() for method in item}
    calls = [(template(path), verb.upper()) for block in blocks for verb, path in CALL.findall(block)]
    assert len(calls) >= 6
    for call in calls:
        assert call in served, f"the tutorial calls {call[1]} {call[0]}, which the API does not serve"


def literal_dicts(trees: list[ast.Module]) -> list[dict]:
    """Every dict display in the blocks, with the values that are literals (others left out)."""
    out = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Dict):
                entries = {}
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant):
                        try:
                            entries[key.value] = ast.literal_eval(value)
                        except ValueError:
                            entries[key.value] = ...
                out.append(entries)
    return out


def test_methods_kinds_and_options_exist(trees: list[ast.Module]) -> None:
    dicts = literal_dicts(trees)
    kinds = [d["kind"] for d in dicts if isinstance(d.get("kind"), str)]
    specs = [d for d in dicts if isinstance(d.get("method"), str)]
    assert {"banana", "bnn"} <= set(kinds) and len(specs) >= 2
    for kind in kinds:
        assert kind in TARGET_KINDS
    for spec in specs:
        method = METHODS[spec["method"]]
        if isinstance(spec.get("options"), dict):
            method.schema.model_validate(spec["options"])
    looped = [ast.literal_eval(node.iter) for tree in trees for node in ast.walk(tree)
              if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == "method"]
    for name in {spec["method"] for spec in specs}.union(*looped):
        assert name in METHODS, f"the tutorial names method {name!r}, which the catalog does not have"
