"""Registry wiring of the analytic and expression target kinds: every kind validates through
`validate_job_spec`, builds through `build_target` in float32 and float64, evaluates vectorised, and its
schema module stays importable without torch (the API validates specs without loading torch)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from inference_core import errors
from inference_core.catalog import METHODS, TARGET_KINDS, resolve
from inference_core.spec import validate_job_spec
from inference_core.targets import BuildContext, Target, build_target

SPECS: dict[str, dict] = {
    "gaussian_mixture": {
        "kind": "gaussian_mixture",
        "weights": [1, 3],
        "means": [[0, 0, 1], [2, 1, 0]],
        "covs": [[[1, 0, 0], [0, 1, 0], [0, 0, 1]], [[0.5, 0.1, 0], [0.1, 0.3, 0], [0, 0, 2]]],
    },
    "banana": {"kind": "banana", "dim": 3, "curvature": 0.1, "scale": 2.0},
    "funnel": {"kind": "funnel", "dim": 3},
    "energy": {"kind": "energy", "name": "U1"},
    "expression": {
        "kind": "expression",
        "dim": 3,
        "log_prob": "-0.5*sum((x - mu)**2 / s**2) + log(1 + x[0]**2)",
        "params": {"mu": [1, 2, 3], "s": 2},
    },
}
DIMS = {"gaussian_mixture": 3, "banana": 3, "funnel": 3, "energy": 2, "expression": 3}


def test_every_new_kind_is_registered_with_an_importable_builder() -> None:
    for name in SPECS:
        kind = TARGET_KINDS[name]
        assert kind.name == name
        assert callable(resolve(kind.builder))
        assert kind.has_reference == (name != "expression")
        assert kind.schema.model_json_schema()["properties"]["kind"]["const"] == name
        assert name in METHODS["svgd"].target_kinds


@pytest.mark.parametrize("name", list(SPECS))
def test_validate_then_build_then_evaluate(name: str) -> None:
    spec = validate_job_spec({"method": "svgd", "target": SPECS[name]})
    assert spec.target["kind"] == name
    json.dumps(spec.target)  # normalised spec is plain JSON
    for dtype in (torch.float32, torch.float64):
        target = build_target(spec.target, BuildContext(dtype=dtype))
        assert isinstance(target, Target) and target.dim == DIMS[name]
        x = torch.randn(6, target.dim, dtype=dtype, generator=torch.Generator().manual_seed(0))
        log_p, score = target.log_prob(x), target.score(x)
        assert log_p.shape == (6,) and log_p.dtype == dtype and torch.isfinite(log_p).all()
        assert score.shape == (6, target.dim) and score.dtype == dtype and torch.isfinite(score).all()
        # vectorised: one batch equals row-by-row evaluation
        rows = torch.cat([target.log_prob(x[i : i + 1]) for i in range(6)])
        torch.testing.assert_close(rows, log_p)
        reference = target.reference()
        if TARGET_KINDS[name].has_reference:
            assert reference is not None and reference.mean.shape == (target.dim,)
            assert reference.cov.shape == (target.dim, target.dim) and reference.mean.dtype == dtype
            assert reference.sample(5, torch.Generator().manual_seed(1)).shape == (5, target.dim)
        else:
            assert reference is None


@pytest.mark.parametrize("name", list(SPECS))
def test_to_changes_dtype(name: str) -> None:
    target = build_target(SPECS[name], BuildContext(dtype=torch.float32)).to(dtype=torch.float64)
    x = torch.randn(4, target.dim, dtype=torch.float64)
    assert target.log_prob(x).dtype == torch.float64
    double = build_target(SPECS[name], BuildContext(dtype=torch.float64))
    torch.testing.assert_close(target.log_prob(x), double.log_prob(x), rtol=1e-6, atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", list(SPECS))
def test_cuda(name: str) -> None:
    target = build_target(SPECS[name], BuildContext(dtype=torch.float32, device=torch.device("cuda")))
    x = torch.randn(8, target.dim, device="cuda")
    cpu = build_target(SPECS[name], BuildContext(dtype=torch.float32))
    torch.testing.assert_close(target.log_prob(x).cpu(), cpu.log_prob(x.cpu()), rtol=1e-5, atol=1e-4)
    assert target.score(x).device.type == "cuda"
    reference = target.reference()
    if reference is not None:
        generator = torch.Generator(device="cuda").manual_seed(0)
        assert reference.sample(10, generator).device.type == "cuda"
        assert reference.mean.device.type == "cuda"


def test_build_target_revalidates_and_rejects_bad_specs() -> None:
    with pytest.raises(ValueError):
        build_target({**SPECS["expression"], "log_prob": "open('x')"})
    with pytest.raises(errors.TargetInvalid) as caught:
        validate_job_spec({"method": "svgd", "target": {**SPECS["funnel"], "dim": 1}})
    assert caught.value.code == "target_invalid"


def test_spec_validation_needs_no_torch() -> None:
    """In a fresh interpreter: validate every new kind (and a rejected expression) without importing torch."""
    program = f"""
import json, sys
from inference_core.spec import validate_job_spec
from inference_core import errors
for target in json.loads({json.dumps(json.dumps(list(SPECS.values())))}):
    validate_job_spec({{"method": "svgd", "target": target}})
try:
    validate_job_spec({{"method": "svgd", "target": {{"kind": "expression", "dim": 1, "log_prob": "x.y"}}}})
    raise SystemExit("not rejected")
except errors.TargetInvalid:
    pass
assert "torch" not in sys.modules, "torch was imported"
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
