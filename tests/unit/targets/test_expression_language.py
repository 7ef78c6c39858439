"""The expression language, construct by construct: semantics against hand-computed or scipy values, edge
values (zeros, infinities, NaN) evaluated without crashing, autograd scores against finite differences,
error messages with positions, and the documented caps at their boundaries."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from inference_core.expression import MAX_DEPTH, MAX_EXPONENT, MAX_SOURCE_LENGTH, parse_expression
from inference_core.expression.compiler import compile_expression
from inference_core.targets import BuildContext, build_target
from inference_core.targets.expression import ExpressionTarget

INF, NAN = math.inf, math.nan


def evaluate(source: str, x, params: dict | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Compile `source` for dim = len(x[0]) and evaluate it at the rows of x."""
    params = params or {}
    shapes = {name: np.shape(value) for name, value in params.items()}
    compiled = compile_expression(parse_expression(source, len(x[0]), shapes))
    tensors = {name: torch.tensor(value, dtype=dtype) for name, value in params.items()}
    return compiled.evaluate(torch.tensor(x, dtype=dtype), tensors, compiled.make_constants(dtype, "cpu"))


def build(
    source: str, dim: int, params: dict | None = None, dtype: torch.dtype = torch.float64
) -> ExpressionTarget:
    spec = {"kind": "expression", "dim": dim, "log_prob": source, "params": params or {}}
    target = build_target(spec, BuildContext(dtype=dtype))
    assert isinstance(target, ExpressionTarget)
    return target


def test_the_issue_example_matches_a_hand_written_torch_density() -> None:
    mu, s = [1.0, -2.0, 0.5], 1.7
    target = build("-0.5*sum((x - mu)**2 / s**2) + log(1 + x[0]**2)", 3, {"mu": mu, "s": s})
    x = torch.randn(7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    want = -0.5 * ((x - torch.tensor(mu, dtype=torch.float64)) ** 2 / s**2).sum(-1) + torch.log1p(
        x[:, 0] ** 2
    )
    torch.testing.assert_close(target.log_prob(x), want, rtol=1e-14, atol=1e-14)
    # closed-form gradient of the same density
    want_score = -(x - torch.tensor(mu, dtype=torch.float64)) / s**2
    want_score[:, 0] += 2 * x[:, 0] / (1 + x[:, 0] ** 2)
    torch.testing.assert_close(target.score(x), want_score, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("source", "a", "want"),
    [
        ("exp(x[0])", 0.7, math.exp(0.7)),
        ("log(x[0])", 0.0, -INF),
        ("log(x[0])", -1.0, NAN),
        ("log1p(x[0])", 1e-12, math.log1p(1e-12)),
        ("expm1(x[0])", 1e-12, math.expm1(1e-12)),
        ("sqrt(x[0])", -1.0, NAN),
        ("sqrt(x[0])", 2.25, 1.5),
        ("square(x[0])", -3.0, 9.0),
        ("abs(x[0])", -2.5, 2.5),
        ("sin(x[0])", 0.3, math.sin(0.3)),
        ("cos(x[0])", 0.3, math.cos(0.3)),
        ("tanh(x[0])", 0.3, math.tanh(0.3)),
        ("sigmoid(x[0])", 0.3, 1 / (1 + math.exp(-0.3))),
        ("log_sigmoid(x[0])", -1000.0, -1000.0),
        ("softplus(x[0])", 1000.0, 1000.0),
        ("softplus(x[0])", -30.0, math.log1p(math.exp(-30.0))),
        ("softplus(x[0])", 25.0, 25.0 + math.log1p(math.exp(-25.0))),
        ("lgamma(x[0])", 4.0, math.log(6.0)),
        ("lgamma(x[0])", 0.0, INF),
        ("maximum(x[0], 2)", 1.0, 2.0),
        ("minimum(x[0], 2)", 1.0, 1.0),
        ("maximum(x[0], 2)", NAN, NAN),
        ("logaddexp(x[0], x[0])", 1000.0, 1000.0 + math.log(2)),
        ("clip(x[0], -1, 1)", 3.0, 1.0),
        ("clip(x[0], -1, 1)", -3.0, -1.0),
        ("1 / x[0]", 0.0, INF),
        ("x[0] / x[0]", 0.0, NAN),
        ("x[0] ** -1", 0.0, INF),
        ("x[0] ** 0.5", -4.0, NAN),
        ("x[0] ** 0", NAN, 1.0),
        ("x[0] ** 16", 10.0, 1e16),
        ("x[0] ** -16", 10.0, 1e-16),
        ("x[0] * 1e308 * 10", 1.0, INF),
        ("x[0] - x[0]", INF, NAN),
        ("pi * x[0] + e", 1.0, math.pi + math.e),
        ("log_normal(x[0], 1, 2)", 0.3, stats.norm.logpdf(0.3, 1, 2)),
        ("log_normal(x[0], 1, 0)", 0.3, NAN),
        ("log_normal(x[0], 1, -2)", 0.3, NAN),
        ("log_laplace(x[0], 1, 2)", 0.3, stats.laplace.logpdf(0.3, 1, 2)),
        ("log_laplace(x[0], 0, 0.001)", 2.0, -math.log(0.002) - 2000.0),  # scipy's underflows to -inf here
        ("log_cauchy(x[0], 1, 2)", 0.3, stats.cauchy.logpdf(0.3, 1, 2)),
        ("log_student_t(x[0], 3, 1, 2)", 0.3, stats.t.logpdf(0.3, 3, 1, 2)),
        ("log_student_t(x[0], 1e300, 1, 2)", 0.3, stats.norm.logpdf(0.3, 1, 2)),
        ("log_student_t(x[0], 1e5, 1, 2)", 0.3, stats.t.logpdf(0.3, 1e5, 1, 2)),
        ("log_student_t(x[0], 0, 1, 2)", 0.3, NAN),
        ("log_gamma_pdf(x[0], 2.5, 1.5)", 0.7, stats.gamma.logpdf(0.7, 2.5, scale=1 / 1.5)),
        ("log_gamma_pdf(x[0], 1, 2)", 0.0, math.log(2.0)),
        ("log_gamma_pdf(x[0], 0.5, 2)", 0.0, INF),
        ("log_gamma_pdf(x[0], 3, 2)", 0.0, -INF),
        ("log_gamma_pdf(x[0], 3, 2)", -1.0, -INF),
        ("log_gamma_pdf(x[0], 3, 0)", 1.0, NAN),
        ("log_gamma_pdf(x[0], -3, 2)", 1.0, NAN),
        ("log_beta_pdf(x[0], 2, 3)", 0.3, stats.beta.logpdf(0.3, 2, 3)),
        ("log_beta_pdf(x[0], 1, 3)", 0.0, math.log(3.0)),
        ("log_beta_pdf(x[0], 2, 3)", 1.5, -INF),
        ("log_beta_pdf(x[0], 2, -3)", 0.5, NAN),
        ("where(x[0] > 0, log(x[0]), -1e3)", -1.0, -1e3),
        ("where(x[0] > 0, log(x[0]), -1e3)", NAN, -1e3),
    ],
)
def test_functions_and_edge_values(source: str, a: float, want: float) -> None:
    got = evaluate(source, [[a, 0.25]]).item()
    if math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(want, rel=1e-12, abs=1e-300)


def test_reductions_and_dot_against_numpy() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 6)) * 3
    w = rng.normal(size=6)
    checks = {
        "sum(x)": x.sum(1),
        "mean(x)": x.mean(1),
        "prod(x)": x.prod(1),
        "max(x)": x.max(1),
        "min(x)": x.min(1),
        "logsumexp(1000 * x)": special.logsumexp(1000 * x, axis=1),
        "norm(x)": np.linalg.norm(x, axis=1),
        "dot(x, w)": x @ w,
        "x @ w": x @ w,
        "sum(x * w) - logsumexp(x[1:4])": (x * w).sum(1) - special.logsumexp(x[:, 1:4], axis=1),
    }
    for source, want in checks.items():
        np.testing.assert_allclose(evaluate(source, x, {"w": w}).numpy(), want, rtol=1e-12, err_msg=source)


@pytest.mark.parametrize(
    "text",
    [
        "0:3", "1:", ":2", "-2:", "::2", "1::2", "::-1", "-1:0:-1", "4:0:-2", "-3:-1", "0:100", "-100:2",
        "5:1:-3", "::3", "2:3",
    ],
)  # fmt: skip
def test_slices_pick_exactly_the_python_elements_in_order(text: str) -> None:
    dim = 6
    picked = list(range(dim))[slice(*(int(p) if p else None for p in (text.split(":") + [""])[:3]))]
    weights = [10.0**k for k in range(len(picked))]  # the order of the picked elements shows in the digits
    x = [[float(i + 1) for i in range(dim)]]
    got = evaluate(f"dot(x[{text}], w)", x, {"w": weights}).item()
    assert got == sum(weight * x[0][i] for weight, i in zip(weights, picked, strict=True))


def test_negative_indices_params_and_matrices() -> None:
    x = [[1.0, 2.0, 3.0], [-1.0, 0.5, 4.0]]
    mu = [0.5, -1.0, 2.0]
    a = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    b = [[1.0, -1.0], [2.0, 0.0], [0.5, 3.0]]
    params = {"mu": mu, "A": a, "B": b, "v": [2.0, -3.0]}
    xs, mus, am, bm, v = np.array(x), np.array(mu), np.array(a), np.array(b), np.array([2.0, -3.0])
    checks = {
        "x[-1] - x[0] + mu[-3]": xs[:, -1] - xs[:, 0] + mus[-3],
        "sum(A @ x)": (xs @ am.T).sum(1),
        "sum(x @ B)": (xs @ bm).sum(1),
        "dot(v @ A, x)": xs @ (v @ am),
        "sum(A[1] * x) + A[0, 2] + A[-1, -1]": (xs * am[1]).sum(1) + am[0, 2] + am[-1, -1],
        "sum(x - mu) / 3": (xs - mus).sum(1) / 3,
        "-x[1] + +x[2]": -xs[:, 1] + xs[:, 2],
        "x[0] - x[1] - x[2]": xs[:, 0] - xs[:, 1] - xs[:, 2],  # left to right, not x0 - (x1 - x2)
        "x[0] / x[1] / x[2]": xs[:, 0] / xs[:, 1] / xs[:, 2],
        "-x[0] ** 2": -(xs[:, 0] ** 2),  # Python precedence: -(x ** 2)
        "2 ** 3 + x[0]": 8 + xs[:, 0],
        "sum(2 * x + mu[0])": (2 * xs + mus[0]).sum(1),
    }
    for source, want in checks.items():
        np.testing.assert_allclose(evaluate(source, x, params).numpy(), want, rtol=1e-13, err_msg=source)


def test_conditions() -> None:
    x = [[-1.0, 0.5], [0.2, 0.7], [0.9, 0.1], [2.0, 2.0]]
    xs = np.array(x)
    x0, x1 = xs[:, 0], xs[:, 1]
    checks = {
        "where(0 < x[0] < 1, 1, 0)": ((x0 > 0) & (x0 < 1)).astype(float),
        "where((x[0] > 0) & (x[1] > 0.5), 1, 0)": ((x0 > 0) & (x1 > 0.5)).astype(float),
        "where((x[0] > 0) | (x[1] > 0.6), 1, 0)": ((x0 > 0) | (x1 > 0.6)).astype(float),
        "where(x[0] > 0 and x[1] > 0.5, 1, 0)": ((x0 > 0) & (x1 > 0.5)).astype(float),
        "where(x[0] > 0 or x[1] > 0.6, 1, 0)": ((x0 > 0) | (x1 > 0.6)).astype(float),
        "where(not x[0] > 0, 1, 0)": (~(x0 > 0)).astype(float),
        "where(~(x[0] > 0), 1, 0)": (~(x0 > 0)).astype(float),
        "where(x[0] == x[1], 1, 0) + where(x[0] != x[1], 10, 0)": np.where(x0 == x1, 1.0, 10.0),
        "where(x[0] <= 0.2, 1, 0) + where(x[0] >= 0.9, 10, 0)": (x0 <= 0.2) + 10.0 * (x0 >= 0.9),
        "sum(where(x > 0.4, x, -x))": np.where(xs > 0.4, xs, -xs).sum(1),
        "sum(where(x > x[0], 1, x))": np.where(xs > x0[:, None], 1, xs).sum(1),
    }
    for source, want in checks.items():
        np.testing.assert_array_equal(evaluate(source, x).numpy(), want, err_msg=source)


def test_a_constant_expression_gives_one_value_per_particle_and_a_zero_score() -> None:
    target = build("1.5 + lgamma(3)", 3)
    x = torch.ones(4, 3, dtype=torch.float64)
    torch.testing.assert_close(target.log_prob(x), torch.full((4,), 1.5 + math.log(2), dtype=torch.float64))
    torch.testing.assert_close(target.score(x), torch.zeros(4, 3, dtype=torch.float64))


@pytest.mark.parametrize(
    "source",
    [
        "-0.5 * dot(x - mu, P @ (x - mu))",
        "log_student_t(x[0], 4, 1, 2) + sum(log_normal(x[1:], mu[1:], 0.5)) + log_sigmoid(x[2] * x[0])",
        "logsumexp(-0.5 * (x - mu) ** 2) + where(x[0] > -10, softplus(x[1]), 0) - norm(x) ** 3",
        "log_gamma_pdf(exp(x[0]), 2, 3) + x[0] + log_beta_pdf(sigmoid(x[1]), 2, 5) + lgamma(5 + x[2] ** 2)",
        "-sum(x ** 4) / 4 + prod(cos(x)) + max(x) - min(x) + mean(tanh(x)) + sum(clip(x, -0.5, 0.5))",
    ],
)
def test_autograd_scores_match_finite_differences(source: str) -> None:
    params = {"mu": [0.3, -0.2, 0.1], "P": [[2.0, 0.3, 0.0], [0.3, 1.0, 0.1], [0.0, 0.1, 0.5]]}
    target = build(source, 3, params)
    x = torch.tensor([[0.4, -0.7, 1.1], [-0.25, 0.35, -0.6]], dtype=torch.float64)
    step = 1e-6
    numeric = torch.zeros_like(x)
    for j in range(3):
        shift = torch.zeros_like(x)
        shift[:, j] = step
        numeric[:, j] = (target.log_prob(x + shift) - target.log_prob(x - shift)) / (2 * step)
    torch.testing.assert_close(target.score(x), numeric, rtol=1e-6, atol=1e-6)


def test_float32_and_dtype_moves() -> None:
    source = "-0.5*sum((x - mu)**2 / s**2) + log_student_t(x[0], 3, 0, 1)"
    params = {"mu": [1.0, 2.0], "s": 0.5}
    x = torch.tensor([[0.1, 0.2], [1.5, -0.5]])
    single = build(source, 2, params, dtype=torch.float32)
    double = build(source, 2, params, dtype=torch.float64)
    got = single.log_prob(x)
    assert got.dtype == torch.float32 and single.score(x).dtype == torch.float32
    torch.testing.assert_close(got.double(), double.log_prob(x.double()), rtol=1e-6, atol=1e-5)
    moved = single.to(dtype=torch.float64)
    assert moved.log_prob(x.double()).dtype == torch.float64
    assert all(value.dtype == torch.float64 for value in moved.params.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_runs_on_cuda() -> None:
    target = build("-0.5*sum((x - mu)**2) + where(x[0] > 0, 1, 0)", 2, {"mu": [1.0, 2.0]}).to(device="cuda")
    x = torch.randn(5, 2, dtype=torch.float64, device="cuda")
    assert target.log_prob(x).device.type == "cuda"
    torch.testing.assert_close(
        target.score(x), -(x - torch.tensor([1.0, 2.0], device="cuda", dtype=torch.float64))
    )


def test_ir_is_immutable() -> None:
    parsed = parse_expression("sum(x) + 1", 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.root.terms = ()  # type: ignore[attr-defined,misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        parsed.dim = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        parsed.param_shapes["y"] = ()  # type: ignore[index]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("1 + x.y", "col 5: attribute access is not allowed"),
        ("(log(x[0]) +\n  open('f'))", "line 2, col 3: calling 'open' is not allowed"),
        ("sum(x) + exp(x[0], 2)", "col 10: exp takes 1 argument, got 2"),
        ("x[0] + x[7]", "col 10: index 7 is out of range for x of length 2"),
        ("x[0] + 2 ** x[1]", "col 13: the exponent of ** must be a number literal"),
    ],
)
def test_errors_name_the_construct_and_its_position(source: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_expression(source, 2)
    assert str(caught.value).startswith(message)


def test_caps_hold_exactly_at_their_boundaries() -> None:
    parse_expression(f"x[0] ** {MAX_EXPONENT:g} + x[0] ** -{MAX_EXPONENT:g}", 1)
    with pytest.raises(ValueError, match="out of range"):
        parse_expression(f"x[0] ** {MAX_EXPONENT + 1e-9!r}", 1)
    # exp(exp(...(x[0]))): k calls, then the subscript, then its name/constant: depth k + 2
    nested = MAX_DEPTH - 2
    parse_expression("exp(" * nested + "x[0]" + ")" * nested, 1)
    with pytest.raises(ValueError, match="nested more than"):
        parse_expression("exp(" * (nested + 1) + "x[0]" + ")" * (nested + 1), 1)
    parse_expression("x[0]" + " " * (MAX_SOURCE_LENGTH - 4), 1)
    with pytest.raises(ValueError, match="longer than"):
        parse_expression("x[0]" + " " * (MAX_SOURCE_LENGTH - 3), 1)


def test_long_flat_sums_are_flattened_not_nested() -> None:
    terms = 600  # far more than MAX_DEPTH: + chains cost no depth
    source = "+".join(f"x[{i % 3}]" for i in range(terms))
    got = evaluate(source, [[1.0, 2.0, 4.0]]).item()
    assert got == sum([1.0, 2.0, 4.0][i % 3] for i in range(terms))
    source = "*".join(["x[0]"] * 300)
    assert evaluate(source, [[1.001]]).item() == pytest.approx(1.001**300, rel=1e-12)


def test_nan_and_inf_inputs_do_not_crash() -> None:
    source = "log(x[0]) + sqrt(x[1]) + lgamma(x[0]) + log_gamma_pdf(x[1], 2, 1) + logsumexp(x) + 1 / x[0]"
    x = [[-1.0, -1.0], [0.0, 0.0], [INF, INF], [NAN, NAN], [-INF, 1.0]]
    target = build(source, 2)
    values = target.log_prob(torch.tensor(x, dtype=torch.float64))
    assert values.shape == (5,)
    assert not torch.isfinite(values).any()
    scores = target.score(torch.tensor(x, dtype=torch.float64))
    assert scores.shape == (5, 2)
