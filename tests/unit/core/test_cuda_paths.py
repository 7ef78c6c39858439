"""The inference core on a CUDA device gives the CPU's answer (skipped where there is no GPU; run on one with
`pytest --noconftest tests/unit/core/test_cuda_paths.py`, which needs no web stack).

Found on a lent H100 (2026-11-26): every method failed on CUDA, because Pathfinder evaluated the target at CPU
rows (the whitening of `auto` and `gpvi`) and the quality block's KSD test multiplied CPU bootstrap signs with
CUDA kernel values. `benchmarks/device_check.py` runs the suite the same way."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from inference_core.training import run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# AR(1) with an intercept, written as an expression over data: params live on the device with the target
_Y = [0.3, 0.8, 0.1, -0.4, 0.2, 0.9, 1.1, 0.5, -0.2, 0.0, 0.4, 0.7]
EXPRESSION = {"kind": "expression", "dim": 3, "params": {"y": _Y},
              "log_prob": "log_normal(x[0], 0, 1) + log_normal(x[1], 0, 0.5) + log_normal(x[2], 0, 1)"
                          " + sum(log_normal(y[1:12], x[0] + x[1] * y[0:11], exp(x[2])))"}


def _run(method: str, device: str, **fields: Any) -> Any:
    spec = {"method": method, "target": EXPRESSION, "device": device, "seed": 0, "num_particles": 50,
            "steps": 200, "options": {"dtype": "float64"}, **fields}
    return run(spec)


@pytest.mark.parametrize("method", ["svgd", "gpvi", "auto", "mfvi"])
def test_a_cuda_run_matches_the_cpu_run(method: str) -> None:
    cpu, cuda = _run(method, "cpu"), _run(method, "cuda")
    assert cuda.particles.device.type == "cuda"
    assert cuda.quality.get("verdict") == cpu.quality.get("verdict")
    # float64 on both: the same arithmetic up to reduction order, amplified a little over 200 steps
    torch.testing.assert_close(cuda.particles.cpu(), cpu.particles, rtol=1e-6, atol=1e-6)


#: the paths added since the last GPU check (2026-11-26), each forced on the small target: `auto`'s normalising
#: flow with the MALA chains and with SVGD, Tukey's tail map, `gpvi` through the flow, and the particle methods
#: in Pathfinder-whitened coordinates. Short fits: the check is CPU = CUDA, not accuracy.
_SHORT_FLOW = {"steps": 100, "batch": 16}
NEWER_PATHS = {
    "auto_flow_mala": ("auto", {"transport": "flow", "engine": "mala", "flow": _SHORT_FLOW}),
    "auto_flow_svgd": ("auto", {"transport": "flow", "engine": "svgd", "flow": _SHORT_FLOW}),
    "auto_tails": ("auto", {"transport": "tails"}),
    "gpvi_flow": ("gpvi", {"precondition": "flow", "flow": _SHORT_FLOW}),
    "svgd_whitened": ("svgd", {"precondition": "pathfinder"}),
}


@pytest.mark.parametrize("case", sorted(NEWER_PATHS))
def test_the_newer_paths_on_cuda_match_the_cpu(case: str) -> None:
    method, options = NEWER_PATHS[case]
    fields = {"options": {"dtype": "float64", **options}, "steps": 100}
    cpu, cuda = _run(method, "cpu", **fields), _run(method, "cuda", **fields)
    assert cuda.particles.device.type == "cuda"
    assert cuda.quality.get("verdict") == cpu.quality.get("verdict")
    # a flow's fit and MALA's accept/reject run longer chains of float64 ops: a looser tolerance than above,
    # still far below any statistical difference
    torch.testing.assert_close(cuda.particles.cpu(), cpu.particles, rtol=1e-4, atol=1e-4)
