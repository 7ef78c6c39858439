"""The four baselines are registered (family "baseline", weight-space kinds plus function_posterior), their
builders resolve, their option schemas are JSON-schema-able, and GET /v1/methods lists them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from inference_core.catalog import METHODS, WEIGHT_SPACE_KINDS, resolve

BASELINES = ["mfvi", "ensemble", "nuts", "hmc"]


@pytest.mark.parametrize("name", BASELINES)
def test_registered_with_schema_and_builder(name: str) -> None:
    info = METHODS[name]
    assert info.family == "baseline" and callable(resolve(info.builder))
    assert info.target_kinds == WEIGHT_SPACE_KINDS | {"function_posterior"}
    json.dumps(info.schema.model_json_schema())
    assert info.schema().model_dump()  # every option has a default


def test_the_catalog_stays_free_of_torch_and_pyro() -> None:
    code = "import sys, inference_core.catalog; print(sorted(m for m in ('torch', 'pyro') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_get_methods_lists_the_baselines(client: TestClient) -> None:
    methods = {m["name"]: m for m in client.get("/v1/methods").json()["methods"]}
    for name in BASELINES:
        assert methods[name]["family"] == "baseline"
        assert "bnn" in methods[name]["target_kinds"] and "function_posterior" in methods[name]["target_kinds"]
    assert "warmup_steps" in methods["nuts"]["options_schema"]["properties"]
