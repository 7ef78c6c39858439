"""The fused Triton kernels against the float64 dense reference, on CPU under TRITON_INTERPRET=1.

Triton decides at *import* time whether its own language helpers are interpreted, so TRITON_INTERPRET=1
must be set before the first `import triton` of a process. Another test (or torch itself) may already have
imported triton in this pytest process, so the kernels run in one child process started with the variable
set; each test below asserts one group of its results. Small n (≤ 128) keeps the interpreter quick.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

# Error bounds: relative to max |reference| (see test_kernels_backends.rel_err).
BOUNDS = {"ieee": 1e-5, "tf32": 5e-3, "bf16": 3e-2}

_CHILD = r"""
import json, os
assert os.environ.get("TRITON_INTERPRET") == "1"
import torch
from inference_core.kernels import IMQ, RBF, kernel_grad_sum, kernel_matmul, ksd2, median_heuristic, mmd2, svgd_direction

def rel(a, b):
    return float((a.double() - b).abs().max() / b.abs().max())

def cloud(n, d, seed, offset=0.0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    return (offset + spread * torch.randn(n, d, generator=g, dtype=torch.float64)).float()

out = {}
# d = 1, 3: direct distances, ieee right-hand sides by float32 FMAs; d = 6: direct in tf32/bf16, Gram in ieee;
# d = 16: Gram form with the row sum apart (17 columns would widen the product); d = 40, 70: Gram form.
for n, m, d, p in [(37, 45, 1, 3), (100, 17, 3, 1), (70, 70, 6, 2), (90, 60, 16, 4), (128, 128, 40, 2), (29, 33, 70, 5)]:
    x, s, y = cloud(n, d, 1), cloud(n, d, 2), cloud(m, d, 3, offset=0.3)
    v = cloud(m, p, 4)
    h = float(median_heuristic(x.double()))
    for name, kern in (("rbf", RBF(h)), ("imq", IMQ(1.0, -0.5, h))):
        for prec in ("ieee", "tf32", "bf16"):
            key = f"{name}-n{n}-m{m}-d{d}-{prec}"
            out[f"matmul/{key}"] = (prec, rel(kernel_matmul(x, y, v, kern, backend="triton", precision=prec),
                                             kernel_matmul(x.double(), y.double(), v.double(), kern, backend="dense")))
            out[f"svgd/{key}"] = (prec, rel(svgd_direction(x, s, kern, backend="triton", precision=prec),
                                           svgd_direction(x.double(), s.double(), kern, backend="dense")))
            if prec == "ieee":
                out[f"gradsum/{key}"] = (prec, rel(kernel_grad_sum(x, kern, backend="triton"),
                                                  kernel_grad_sum(x.double(), kern, backend="dense")))
                for unbiased in (False, True):
                    ref = ksd2(x.double(), s.double(), kern, unbiased, backend="dense")
                    got = ksd2(x, s, kern, unbiased, backend="triton")
                    out[f"ksd/{key}-u{int(unbiased)}"] = (prec, abs(float(got) - float(ref)) / abs(float(ref)))
                    ref = mmd2(x.double(), y.double(), kern, unbiased, backend="dense")
                    got = mmd2(x, y, kern, unbiased, backend="triton")
                    out[f"mmd/{key}-u{int(unbiased)}"] = (prec, abs(float(got) - float(ref)))

# Columns split across programs (on CUDA when the rows alone leave multiprocessors idle): same sums.
import inference_core.kernels.triton_backend as tb
tb._split = lambda *args: 3
for d in (2, 16):
    x, s, y = cloud(150, d, 7), cloud(150, d, 8), cloud(100, d, 9, offset=0.3)
    h = float(median_heuristic(x.double()))
    for name, kern in (("rbf", RBF(h)), ("imq", IMQ(1.0, -0.5, h))):
        out[f"split/svgd-{name}-d{d}"] = ("ieee", rel(svgd_direction(x, s, kern, backend="triton"),
                                                      svgd_direction(x.double(), s.double(), kern, backend="dense")))
        out[f"split/matmul-{name}-d{d}"] = ("ieee", rel(kernel_matmul(x, y, s[:100], kern, backend="triton"),
                                                        kernel_matmul(x.double(), y.double(), s[:100].double(), kern,
                                                                      backend="dense")))

# Offset test through the fused kernel; and k(x, x) = 1 exactly on its diagonal.
x, s = cloud(96, 3, 5, offset=1e3, spread=1e-2), cloud(96, 3, 6)
h = median_heuristic(x.double())
out["offset/svgd"] = ("offset", rel(svgd_direction(x, s, float(h), backend="triton"),
                                     svgd_direction(x.double(), s.double(), h, backend="dense")))
eye = torch.eye(40)
k = kernel_matmul(x[:40], None, eye, 1e-4, backend="triton")
out["diag/exact_one"] = ("exact", float((k.diagonal() - 1).abs().max()))
print("RESULTS " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def results():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULTS "))
    return json.loads(line[len("RESULTS ") :])


def _check(results, prefix):
    cases = {k: v for k, v in results.items() if k.startswith(prefix)}
    assert cases, f"no {prefix} cases ran"
    bad = {k: err for k, (prec, err) in cases.items() if not err < BOUNDS.get(prec, 1e-5)}
    assert not bad, bad


@pytest.mark.timeout(600)
def test_triton_kernel_matmul_including_y_not_x(results):
    _check(results, "matmul/")


def test_triton_svgd_direction(results):
    _check(results, "svgd/")


def test_triton_kernel_grad_sum(results):
    _check(results, "gradsum/")


def test_triton_ksd2_u_and_v_statistics(results):
    _check(results, "ksd/")


def test_triton_mmd2(results):
    _check(results, "mmd/")


def test_triton_columns_split_across_programs(results):
    _check(results, "split/")


def test_triton_offset_cloud_and_exact_diagonal(results):
    assert results["offset/svgd"][1] < 1e-4
    assert results["diag/exact_one"][1] == 0.0


def test_triton_backend_imports_without_cuda_or_interpreter():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    code = "import inference_core.kernels.triton_backend as t; print(t.__name__)"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
