"""The log-sum-exp rewrite (inference_core/expression/stabilize.py): ``log`` of a sum with exp factors is
evaluated as m + log Σ c_i e^{a_i − m}.

(a) the naive two-component mixture with log-components at −1000…−5000 is finite in float32 and matches a
float64 torch.logaddexp closed form; its score matches the analytic gradient and float64 finite
differences; (b) random expressions of the covered shapes at moderate values give the un-rewritten
compiled expression's values and gradients (float64, rtol 1e-6); (c) a negative sum is still NaN;
(d) log(sum(w*exp(v))) and log(mean(exp(v))) of a vector are stable too. Issue 14.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from inference_core.expression import ir, parse_expression
from inference_core.expression.compiler import compile_expression
from inference_core.expression.stabilize import stabilize
from inference_core.targets import BuildContext, build_target

MIXTURE = "log(theta*exp(sum(log_normal(x, m1, s))) + (1 - theta)*exp(sum(log_normal(x, m2, s))))"
MIX_PARAMS = {"theta": 0.3, "m1": [1.0, -1.0, 0.5, 0.0], "m2": [-1.0, 1.0, 0.0, 0.5], "s": 0.05}


def evaluate(source: str, x: torch.Tensor, params: dict, *, stabilized: bool = True,
             grad: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Compile `source` (dim = x.shape[1]) with or without the rewrite; value and (optionally) d/dx."""
    shapes = {name: np.shape(value) for name, value in params.items()}
    compiled = compile_expression(parse_expression(source, x.shape[1], shapes), stabilize=stabilized)
    tensors = {name: torch.tensor(value, dtype=x.dtype) for name, value in params.items()}
    x = x.detach().clone().requires_grad_(grad)
    value = compiled.evaluate(x, tensors, compiled.make_constants(x.dtype, "cpu"))
    score = torch.autograd.grad(value.sum(), x)[0] if grad else None
    return value.detach(), score


def mixture_points() -> torch.Tensor:
    """Points whose two log-components both lie in about [−5000, −1000] (s = 0.05: 200 per unit²)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-2.5, 2.5, size=(64, 4))
    x = x.astype(np.float32).astype(np.float64)  # the float32 input, exactly, for both precisions
    a, b = mixture_components(x)
    keep = (np.maximum(a, b) < -1000) & (np.minimum(a, b) > -5000)
    assert keep.sum() >= 10
    return torch.tensor(x[keep])


def mixture_components(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = MIX_PARAMS["s"]
    a = stats.norm.logpdf(x, np.asarray(MIX_PARAMS["m1"]), s).sum(-1)
    b = stats.norm.logpdf(x, np.asarray(MIX_PARAMS["m2"]), s).sum(-1)
    return a, b


def test_the_naive_mixture_is_finite_in_float32_and_matches_the_float64_logaddexp() -> None:
    x64 = mixture_points()
    a, b = (torch.tensor(c) for c in mixture_components(x64.numpy()))
    theta = MIX_PARAMS["theta"]
    reference = torch.logaddexp(math.log(theta) + a, math.log(1 - theta) + b)  # float64 closed form
    # analytic score: the responsibilities times each component's score −(x − m)/s²
    r1 = torch.sigmoid((math.log(theta) + a) - (math.log(1 - theta) + b)).unsqueeze(-1)
    s2 = MIX_PARAMS["s"] ** 2
    m1, m2 = torch.tensor(MIX_PARAMS["m1"]), torch.tensor(MIX_PARAMS["m2"])
    analytic = -(r1 * (x64 - m1) + (1 - r1) * (x64 - m2)) / s2

    naive, _ = evaluate(MIXTURE, x64.float(), MIX_PARAMS, stabilized=False)
    assert torch.isneginf(naive).all()  # the failure of issue 14: exp underflows to 0

    for dtype, rtol in ((torch.float32, 2e-6), (torch.float64, 1e-12)):
        value, score = evaluate(MIXTURE, x64.to(dtype), MIX_PARAMS, grad=True)
        assert value.dtype == dtype and torch.isfinite(value).all() and torch.isfinite(score).all()
        torch.testing.assert_close(value.double(), reference, rtol=rtol, atol=0)
        # |score| ~ 1e3 with float32 cancellation in (x − m)/s²: compare against the scale of the score
        torch.testing.assert_close(score.double(), analytic, rtol=rtol * 10, atol=rtol * 10 * analytic.abs().max())

    # the job path (build_target → ExpressionTarget in float32) uses the rewrite too
    spec = {"kind": "expression", "dim": 4, "log_prob": MIXTURE, "params": MIX_PARAMS}
    target = build_target(spec, BuildContext(dtype=torch.float32))
    torch.testing.assert_close(target.log_prob(x64.float()).double(), reference, rtol=2e-6, atol=0)


def test_the_mixture_score_matches_float64_finite_differences() -> None:
    x = mixture_points()[:4]
    _, score = evaluate(MIXTURE, x, MIX_PARAMS, grad=True)
    h = 1e-6
    for j in range(x.shape[1]):
        step = torch.zeros_like(x)
        step[:, j] = h
        plus, _ = evaluate(MIXTURE, x + step, MIX_PARAMS)
        minus, _ = evaluate(MIXTURE, x - step, MIX_PARAMS)
        torch.testing.assert_close(score[:, j], (plus - minus) / (2 * h), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    ("source", "x", "want"),
    [
        # overflow as well as underflow: e^1000 is inf even in float64
        ("log(exp(x[0]) + exp(x[1]))", [1000.0, 999.0], 1000.0 + math.log1p(math.exp(-1.0))),
        ("log(exp(x[0]))", [-2000.0, 0.0], -2000.0),
        ("log(2*exp(x[0]))", [-2000.0, 0.0], -2000.0 + math.log(2)),
        ("log(exp(x[0])*exp(x[1])*3)", [-600.0, -600.0], -1200.0 + math.log(3)),
        ("log(exp(x[0])/exp(x[1]))", [-600.0, 600.0], -1200.0),
        ("log(1/exp(x[0]))", [600.0, 0.0], -600.0),
        ("log(exp(x[0])**2)", [-600.0, 0.0], -1200.0),
        ("log(1 + exp(x[0]))", [-2000.0, 0.0], 0.0),
        ("log(1 + exp(x[0]))", [2000.0, 0.0], 2000.0),
        ("log(exp(x[0]) - exp(x[1]))", [-2000.0, -2001.0], -2000.0 + math.log1p(-math.exp(-1.0))),
        ("log(-(-exp(x[0]) - exp(x[1])))", [-2000.0, -2000.0], -2000.0 + math.log(2)),
        ("log(exp(x[0]) + (exp(x[1]) + 1*exp(x[0])))", [-2000.0, -2000.0], -2000.0 + math.log(3)),
        # a rewritten log nested inside the exponent of another
        ("log(exp(log(exp(x[0]) + exp(x[1]))) + exp(x[1]))", [-3000.0, -3000.0], -3000.0 + math.log(3)),
    ],
)
def test_covered_shapes_at_extreme_values(source: str, x: list[float], want: float) -> None:
    for dtype in (torch.float32, torch.float64):
        value, score = evaluate(source, torch.tensor([x], dtype=dtype), {}, grad=True)
        assert torch.isfinite(score).all(), (source, dtype, score)
        assert value.item() == pytest.approx(want, rel=1e-6 if dtype == torch.float32 else 1e-12), (source, dtype)


def test_non_finite_exponents_fall_back_to_the_written_expression() -> None:
    x = torch.tensor([[0.0, 1.0], [math.nan, 1.0], [math.inf, 1.0]], dtype=torch.float64)
    for source in ("log(exp(log(x[0])) + exp(log(x[0])))", "log(exp(x[0]) + exp(x[0]))"):
        rewritten, _ = evaluate(source, x, {})
        written, _ = evaluate(source, x, {}, stabilized=False)
        torch.testing.assert_close(rewritten, written, equal_nan=True)


def test_negative_sums_stay_nan() -> None:
    x = torch.tensor([[0.0, 0.0], [-3000.0, -3000.0], [1000.0, 1000.0], [0.0, 1.0]])
    for dtype in (torch.float32, torch.float64):
        value, _ = evaluate("log(exp(x[0]) - 2*exp(x[1]))", x.to(dtype), {})
        assert torch.isnan(value).all()
        value, _ = evaluate("log(0.5*exp(x[0]) - exp(x[1]) + 0.25)", torch.tensor([[0.0, 1.0]], dtype=dtype), {})
        assert torch.isnan(value).all()


def test_vector_sums_and_means() -> None:
    rng = np.random.default_rng(1)
    w = rng.uniform(0.1, 1.0, size=5)
    mu = rng.normal(size=5)
    x64 = torch.tensor(rng.normal(size=(6, 5))).float().double()
    v = -800.0 * (x64 - torch.tensor(mu)) ** 2 - 1500.0  # every e^v underflows even in float64
    ref_sum = torch.logsumexp(torch.log(torch.tensor(w)) + v, -1)
    ref_mean = torch.logsumexp(v, -1) - math.log(5)
    params = {"w": w.tolist(), "mu": mu.tolist()}
    for dtype, rtol in ((torch.float32, 2e-6), (torch.float64, 1e-12)):
        x = x64.to(dtype)
        value, score = evaluate("log(sum(w*exp(-800*square(x - mu) - 1500)))", x, params, grad=True)
        torch.testing.assert_close(value.double(), ref_sum, rtol=rtol, atol=0)
        # the score is the softmax-weighted component scores −1600 (x − mu)
        weights = torch.softmax(torch.log(torch.tensor(w)) + v, -1)
        torch.testing.assert_close(score.double(), weights * (-1600.0) * (x64 - torch.tensor(mu)),
                                   rtol=rtol * 100, atol=rtol * 1e4)
        value, _ = evaluate("log(mean(exp(-800*square(x - mu) - 1500)))", x, params)
        torch.testing.assert_close(value.double(), ref_mean, rtol=rtol, atol=0)
        # a scalar exponent against a vector coefficient, and a unit term beside the vector
        value, _ = evaluate("log(sum(w*exp(x[0]*1000)))", x, params)
        torch.testing.assert_close(value.double(), 1000 * x64[:, 0] + math.log(w.sum()), rtol=rtol, atol=0)
        value, _ = evaluate("log(sum(w + exp(x*1000)))", x, params)
        want = torch.logsumexp(torch.cat([torch.log(torch.tensor(w)).expand(6, 5), 1000 * x64], -1), -1)
        torch.testing.assert_close(value.double(), want, rtol=rtol, atol=0)


def test_the_parser_ir_is_left_alone_and_other_logs_are_not_rewritten() -> None:
    expression = parse_expression("log(theta*exp(x[0]) + 1) + log(1 + x[1]**2) + log(sum(x*x))", 2,
                                  {"theta": ()})
    rewritten = stabilize(expression.root)
    assert isinstance(rewritten, ir.Add) and isinstance(expression.root, ir.Add)
    kinds = [type(term).__name__ for term in rewritten.terms]
    assert kinds == ["ShiftedLogSum", "Call", "Call"]
    assert all(isinstance(term, ir.Call) for term in expression.root.terms)  # the parser's tree is unchanged


# --- (b) property: the rewrite is exact -------------------------------------------------------------------

COEFFICIENTS = ["", "theta", "(1 - theta)", "(x[0]**2 + 1)", "2.5", "sigmoid(x[1])", "x[2]", "v[1]"]
EXPONENTS = ["x[0]", "-0.5*square(x[1])", "sin(x[2])", "2*x[1] - x[0]", "sum(v*x)", "log(1 + x[2]**2)",
             "log(exp(x[0]) + exp(x[1]))"]
FORMS = ["{c}*exp({a})", "exp({a})*{c}", "{c}/exp({a})", "exp({a})*exp({b})*{c}", "-{c}*exp({a})",
         "exp({a})**2*{c}", "{c}", "{c}*(exp({a}) + exp({b}))"]


@st.composite
def log_sums(draw: st.DrawFn) -> tuple[str, str]:
    """log(Σ ± term) and log(Σ |term|) (the conditioning reference), as sources."""
    parts, magnitudes = [], []
    for k in range(draw(st.integers(1, 4))):
        c = draw(st.sampled_from(COEFFICIENTS)) or "1"
        a, b = draw(st.sampled_from(EXPONENTS)), draw(st.sampled_from(EXPONENTS))
        form = draw(st.sampled_from(FORMS))
        term = form.format(c=c, a=a, b=b)
        sign = "-" if k and draw(st.booleans()) else "+"
        parts.append(f"{sign} {term}" if k else term)
        magnitudes.append(f"abs({term})")
    return f"log({' '.join(parts)})", f"log({' + '.join(magnitudes)})"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(log_sums(), st.integers(0, 2**32 - 1))
def test_the_rewrite_equals_the_written_expression_at_moderate_values(sources: tuple[str, str], seed: int) -> None:
    source, magnitude = sources
    params = {"theta": 0.3, "v": [0.5, -1.0, 2.0]}
    x = torch.tensor(np.random.default_rng(seed).uniform(-2, 2, size=(16, 3)))
    value, score = evaluate(source, x, params, grad=True)
    written, written_score = evaluate(source, x, params, stabilized=False, grad=True)
    assert torch.equal(torch.isnan(value), torch.isnan(written)), source
    # Only where the sum is not cancelled away: the rounding error of either form is ~ eps·Σ|t|/|Σt|.
    abs_sum, _ = evaluate(f"exp({magnitude})", x, params, stabilized=False)
    signed_sum, _ = evaluate(f"abs({source[4:-1]})", x, params, stabilized=False)
    well_conditioned = (abs_sum < 1e6 * signed_sum) & torch.isfinite(written)
    torch.testing.assert_close(value[well_conditioned], written[well_conditioned], rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(score[well_conditioned], written_score[well_conditioned], rtol=1e-6, atol=1e-9)
