"""The expression language's matrices (issue 41, item 6): a Gaussian-process marginal likelihood with a
parameter-dependent kernel against scipy, each matrix function against numpy/scipy in float64 for every
batching of its operands, autograd against central finite differences, matrices that are not positive
definite giving NaN without raising, and the parse-time shape rules and size caps."""

from __future__ import annotations

import math
import sys
import threading

import numpy as np
import pytest
import torch
from scipy import linalg as sla
from scipy import stats

from inference_core import errors
from inference_core.expression import MAX_TOTAL_ELEMENTS, MAX_VALUE_ELEMENTS, parse_expression
from inference_core.expression.compiler import compile_expression
from inference_core.spec import validate_job_spec
from inference_core.targets import BuildContext, build_target
from inference_core.targets.expression import EVAL_CHUNK_ELEMENTS, ExpressionTarget

RNG = np.random.default_rng(41)
N_OBS = 12
T = np.sort(RNG.uniform(0, 5, N_OBS))  # 1-D inputs
T2 = RNG.normal(size=(N_OBS, 2))  # 2-D inputs
Y = np.sin(T) + 0.1 * RNG.normal(size=N_OBS)

# x = (log amplitude, log length-scale, log noise sd)
GP = "log_mvnormal(y, 0, exp(2*x[0]) * exp(-0.5 * sqdist(t, t) / exp(2*x[1])) + exp(2*x[2]) * eye(12))"
# the same, written out with the factor: −½|L⁻¹y|² − ½ log det K − (n/2) log 2π
GP_BY_HAND = (
    "-0.5 * sum(square(trisolve(cholesky(K(x)), y))) - 0.5 * logdet(K(x)) - 6 * log(2 * pi)"
)
KERNEL = "(exp(2*x[0]) * exp(-0.5 * sqdist(t, t) / exp(2*x[1])) + exp(2*x[2]) * eye(12))"


def evaluate(source: str, x, params: dict, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    shapes = {name: np.shape(value) for name, value in params.items()}
    compiled = compile_expression(parse_expression(source, np.shape(x)[1], shapes))
    tensors = {name: torch.tensor(np.asarray(value), dtype=dtype) for name, value in params.items()}
    return compiled.evaluate(torch.tensor(np.asarray(x), dtype=dtype), tensors, compiled.make_constants(dtype, "cpu"))


def build(source: str, dim: int, params: dict, dtype: torch.dtype = torch.float64) -> ExpressionTarget:
    spec = {"kind": "expression", "dim": dim, "log_prob": source,
            "params": {name: np.asarray(value).tolist() for name, value in params.items()}}
    target = build_target(spec, BuildContext(dtype=dtype))
    assert isinstance(target, ExpressionTarget)
    return target


def gp_reference(row: np.ndarray, inputs: np.ndarray, y: np.ndarray) -> float:
    """The GP marginal log-likelihood by scipy, from the textbook kernel (no code shared with the compiler)."""
    amplitude2, length2, noise2 = np.exp(2 * row)
    if inputs.ndim == 1:
        d2 = np.subtract.outer(inputs, inputs) ** 2
    else:
        d2 = ((inputs[:, None, :] - inputs[None, :, :]) ** 2).sum(-1)
    cov = amplitude2 * np.exp(-0.5 * d2 / length2) + noise2 * np.eye(len(y))
    return float(stats.multivariate_normal(np.zeros(len(y)), cov).logpdf(y))


XS = RNG.normal(scale=0.7, size=(6, 3))


def test_gp_marginal_likelihood_matches_scipy_at_random_hyperparameters() -> None:
    target = build(GP, 3, {"y": Y, "t": T})
    got = target.log_prob(torch.from_numpy(XS)).numpy()
    want = np.array([gp_reference(row, T, Y) for row in XS])
    np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)
    # written out with cholesky / trisolve / logdet: the same numbers
    by_hand = GP_BY_HAND.replace("K(x)", KERNEL)
    np.testing.assert_allclose(evaluate(by_hand, XS, {"y": Y, "t": T}).numpy(), want, rtol=1e-11, atol=1e-11)


def test_gp_over_2d_inputs_uses_row_distances() -> None:
    source = GP.replace("sqdist(t, t)", "sqdist(t2, t2)")
    got = evaluate(source, XS, {"y": Y, "t2": T2}).numpy()
    want = np.array([gp_reference(row, T2, Y) for row in XS])
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def central_differences(target: ExpressionTarget, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(x)
    for j in range(x.shape[1]):
        up, down = x.copy(), x.copy()
        up[:, j] += h
        down[:, j] -= h
        diff = target.log_prob(torch.from_numpy(up)) - target.log_prob(torch.from_numpy(down))
        grad[:, j] = diff.numpy() / (2 * h)
    return grad


@pytest.mark.parametrize(
    "source",
    [
        GP,
        GP.replace("sqdist(t, t)", "sqdist(t2, t2)"),
        GP_BY_HAND.replace("K(x)", KERNEL),
        # x inside the matrices' entries, a solve against x, a diagonal matrix of x, sqdist of x with itself
        "sum(trisolve(cholesky(A + diag(exp(x))), x)) + logdet(exp(-0.5 * sqdist(x, x)) + 0.1 * eye(3))",
        "log_mvnormal(x, mean(t) * x[1], diag(exp(x)) + 0.5)",
    ],
)
def test_autograd_scores_match_central_finite_differences(source: str) -> None:
    params = {"y": Y, "t": T, "t2": T2, "A": np.array([[2.0, 0.3, 0.1], [0.3, 1.5, 0.2], [0.1, 0.2, 1.0]])}
    target = build(source, 3, {name: value for name, value in params.items() if name in source})
    x = XS.copy()
    assert torch.isfinite(target.log_prob(torch.from_numpy(x))).all()
    np.testing.assert_allclose(target.score(torch.from_numpy(x)).numpy(), central_differences(target, x),
                               rtol=1e-6, atol=1e-6)


# --- each function against numpy/scipy, for every batching of its operands ---------------------------

M = np.array([[2.0, 0.5, 0.2], [0.5, 1.0, -0.3], [0.2, -0.3, 1.5]])  # SPD
NONSYM = M + np.array([[0.0, 0.4, -0.2], [0.0, 0.0, 0.7], [0.0, 0.0, 0.0]])
B = np.array([[1.0, -2.0], [0.5, 0.0], [3.0, 1.0]])
V = np.array([0.3, -1.2, 2.0])
ROWS = RNG.normal(size=(4, 3))


def _rows(source: str, reference, params: dict, x: np.ndarray = ROWS, rtol: float = 1e-12) -> None:
    got = evaluate(source, x, params).numpy()
    want = np.array([reference(row) for row in x])
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-12)


def test_sqdist_against_numpy() -> None:
    params = {"v": V, "w": np.array([1.0, 4.0]), "B": B, "C": RNG.normal(size=(5, 2))}
    _rows("sum(sqdist(v, w) @ w)", lambda r: (np.subtract.outer(V, [1.0, 4.0]) ** 2 @ [1.0, 4.0]).sum(), params)
    _rows("sum(sqdist(x, v) @ v)", lambda r: (np.subtract.outer(r, V) ** 2 @ V).sum(), params)  # batched @ const
    _rows("sum(v @ sqdist(v, x))", lambda r: (V @ np.subtract.outer(V, r) ** 2).sum(), params)
    c = params["C"]
    rows_ref = ((B[:, None, :] - c[None, :, :]) ** 2).sum(-1)
    _rows("sum(sqdist(B, C) @ w5)", lambda r: (rows_ref @ np.arange(5.0)).sum(),
          {"B": B, "C": c, "w5": np.arange(5.0)})
    # x-dependent rows: B scaled by x[0] against C, and C against scaled B (both batchings of the cross term)
    _rows("sum(sqdist(B * x[0], C) @ w5)",
          lambda r: ((((B * r[0])[:, None, :] - c[None]) ** 2).sum(-1) @ np.arange(5.0)).sum(),
          {"B": B, "C": c, "w5": np.arange(5.0)}, rtol=1e-10)
    _rows("sum(w3 @ sqdist(C, B * x[0]))",
          lambda r: (np.arange(5.0) @ (((c[:, None, :] - (B * r[0])[None]) ** 2).sum(-1))).sum(),
          {"B": B, "C": c, "w3": np.arange(5.0)}, rtol=1e-10)


def test_a_row_meets_itself_at_exactly_zero_or_more() -> None:
    far = RNG.normal(loc=1e4, size=(50, 3))  # cancellation-prone: |a|² ≫ distances
    got = evaluate("min(diag(sqdist(F, F))) + 0 * x[0]", [[0.0]], {"F": far}).item()
    assert 0.0 <= got < 1e-6


def test_eye_diag_and_elementwise_matrices_against_numpy() -> None:
    params = {"M": M, "v": V, "B": B}
    _rows("sum(diag(eye(3) * x[0] + M))", lambda r: 3 * r[0] + np.trace(M), params)
    _rows("sum(diag(v) @ x)", lambda r: V @ r, params)
    _rows("sum(diag(diag(x)) * v)", lambda r: (r * V).sum(), params)
    # a vector meets a matrix as each of its rows; scalars everywhere; functions elementwise
    _rows("sum((exp(B - x[0:2]) / 2 + x[2]) @ x[0:2])",
          lambda r: ((np.exp(B - r[0:2]) / 2 + r[2]) @ r[0:2]).sum(), params)
    _rows("sum((M ** 2 - where(M > 0, M, -M) * x[1]) @ x)",
          lambda r: ((M**2 - np.abs(M) * r[1]) @ r).sum(), params)
    _rows("sum(x @ log_normal(M, x[0], 2))",
          lambda r: (r @ stats.norm.logpdf(M, r[0], 2)).sum(), params)


def test_matrix_products_with_batched_matrices() -> None:
    params = {"M": M, "v": V}
    _rows("sum((M * x[0]) @ x)", lambda r: ((M * r[0]) @ r).sum(), params)  # batched matrix @ batched vector
    _rows("sum((M * x[0]) @ v)", lambda r: ((M * r[0]) @ V).sum(), params)  # batched matrix @ constant vector
    _rows("sum(x @ (M + x[1]))", lambda r: (r @ (M + r[1])).sum(), params)
    _rows("sum(v @ (M + x[1]))", lambda r: (V @ (M + r[1])).sum(), params)


def test_cholesky_trisolve_logdet_log_mvnormal_against_scipy() -> None:
    params = {"M": M, "v": V, "B": B, "N": NONSYM}
    chol = np.linalg.cholesky(M)
    _rows("sum(cholesky(M) @ v)", lambda r: (chol @ V).sum(), params)
    # the symmetric part of a non-symmetric matrix
    sym = np.linalg.cholesky(0.5 * (NONSYM + NONSYM.T))
    _rows("sum(cholesky(N) @ v) + logdet(N)",
          lambda r: (sym @ V).sum() + np.linalg.slogdet(0.5 * (NONSYM + NONSYM.T))[1], params)
    # L constant, b per particle; L per particle, b constant; both per particle; b a matrix
    _rows("sum(trisolve(cholesky(M), x))", lambda r: sla.solve_triangular(chol, r, lower=True).sum(), params)
    _rows("sum(trisolve(cholesky(M * exp(x[0])), v))",
          lambda r: sla.solve_triangular(np.linalg.cholesky(M * np.exp(r[0])), V, lower=True).sum(), params)
    _rows("sum(trisolve(cholesky(M + x[1] ** 2), x))",
          lambda r: sla.solve_triangular(np.linalg.cholesky(M + r[1] ** 2), r, lower=True).sum(), params)
    _rows("sum(trisolve(cholesky(M), B * x[0]) @ v[0:2])",
          lambda r: (sla.solve_triangular(chol, B * r[0], lower=True) @ V[0:2]).sum(), params)
    _rows("sum(trisolve(cholesky(M * exp(x[2])), B) @ v[0:2])",
          lambda r: (sla.solve_triangular(np.linalg.cholesky(M * np.exp(r[2])), B, lower=True) @ V[0:2]).sum(),
          params)
    # trisolve reads only the lower triangle
    _rows("sum(trisolve(cholesky(M) + 100 * (N - M), v))",
          lambda r: sla.solve_triangular(chol, V, lower=True).sum(), params)
    _rows("logdet(M * exp(x[0]))", lambda r: np.linalg.slogdet(M * np.exp(r[0]))[1], params)
    _rows("log_mvnormal(x, v, M)", lambda r: stats.multivariate_normal(V, M).logpdf(r), params)
    _rows("log_mvnormal(v, x[0], M * exp(x[1]))",
          lambda r: stats.multivariate_normal(np.full(3, r[0]), M * np.exp(r[1])).logpdf(V), params)
    _rows("log_mvnormal(x, x * 0.5, M + diag(exp(x)))",
          lambda r: stats.multivariate_normal(0.5 * r, M + np.diag(np.exp(r))).logpdf(r), params)


def test_log_of_a_matrix_mixture_is_stabilised_like_vectors() -> None:
    params = {"M": M}
    source = "sum(log(0.3 * exp(M * x[0]) + 0.7 * exp(-M * x[0])) @ x)"
    want = lambda r: (np.logaddexp(np.log(0.3) + M * r[0], np.log(0.7) - M * r[0]) @ r).sum()  # noqa: E731
    _rows(source, want, params, rtol=1e-11)
    huge = np.array([[800.0, 1.0, 1.0]])  # e^{±1600}: the naive form overflows, the stabilised one does not
    got = evaluate(source, huge, params).numpy()
    np.testing.assert_allclose(got, [want(huge[0])], rtol=1e-11)


# --- not positive definite: NaN, never an exception ---------------------------------------------------


INDEFINITE = np.array([[1.0, 2.0], [2.0, 1.0]])


@pytest.mark.parametrize(
    "source",
    ["sum(cholesky(P) @ x)", "logdet(P) + x[0]", "log_mvnormal(x, 0, P)", "sum(trisolve(cholesky(P), x))",
     "log_mvnormal(x, 0, P * x[0])", "logdet(P * x[0] + Z)", "sum(trisolve(Z, x))"],
)
def test_a_matrix_that_is_not_spd_gives_nan_without_raising(source: str) -> None:
    target = build(source, 2, {name: value for name, value in
                               {"P": INDEFINITE, "Z": np.zeros((2, 2))}.items() if name in source})
    x = torch.tensor([[0.5, -1.0], [1.0, 2.0], [math.nan, 1.0], [math.inf, 0.0]], dtype=torch.float64)
    values = target.log_prob(x)
    assert values.shape == (4,) and not torch.isfinite(values).any()
    score = target.score(x)  # must not raise either
    assert score.shape == (4, 2)


def test_only_the_particles_whose_matrix_is_not_spd_are_nan() -> None:
    # K = [[1, r], [r, 1]] is SPD exactly when |r| < 1; r = x[0]
    source = "log_mvnormal(v, 0, eye(2) + x[0] * (1 - eye(2)))"
    target = build(source, 1, {"v": [0.3, -0.4]})
    x = torch.tensor([[0.5], [1.5], [-0.2], [-3.0], [1.0]], dtype=torch.float64)
    values = target.log_prob(x).numpy()
    for got, r in zip(values, x[:, 0].tolist(), strict=True):
        if abs(r) < 1:
            assert got == pytest.approx(stats.multivariate_normal([0, 0], [[1, r], [r, 1]]).logpdf([0.3, -0.4]),
                                        rel=1e-12)
        else:
            assert math.isnan(got)
    score = target.score(x).numpy()
    assert np.isfinite(score[[0, 2]]).all()


def test_float32_jobs_build_and_evaluate_the_gp() -> None:
    target = build(GP, 3, {"y": Y, "t": T}, dtype=torch.float32)
    got = target.log_prob(torch.from_numpy(XS).float())
    assert got.dtype == torch.float32
    want = np.array([gp_reference(row, T, Y) for row in XS])
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-3)
    assert torch.isfinite(target.score(torch.from_numpy(XS).float())).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gp_runs_on_cuda() -> None:
    spec = {"kind": "expression", "dim": 3, "log_prob": GP, "params": {"y": Y.tolist(), "t": T.tolist()}}
    target = build_target(spec, BuildContext(dtype=torch.float64, device=torch.device("cuda")))
    x = torch.from_numpy(XS).cuda()
    want = np.array([gp_reference(row, T, Y) for row in XS])
    np.testing.assert_allclose(target.log_prob(x).cpu().numpy(), want, rtol=1e-10)
    bad = torch.tensor([[0.0, 0.0, -40.0]], dtype=torch.float64, device="cuda")  # noise e^-80: K singular-ish
    assert target.score(bad).shape == (1, 3)


# --- shapes and caps at parse time ------------------------------------------------------------------------

SHAPES = {"v": (3,), "w": (2,), "M": (3, 3), "B": (3, 2), "s": ()}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("sum(sqdist(v, B))", "col 5: sqdist() needs two vectors, or two matrices with the same number of columns"),
        ("sum(sqdist(B, M))", "same number of columns, got a 3x2 matrix and a 3x3 matrix"),
        ("sum(diag(B))", "diag() needs a vector or a square matrix, got a 3x2 matrix"),
        ("logdet(B)", "logdet() needs a square matrix, got a 3x2 matrix"),
        ("logdet(v)", "logdet() needs a square matrix, got a vector of length 3"),
        ("sum(cholesky(s))", "cholesky() needs a square matrix, got a scalar"),
        ("sum(trisolve(B, v))", "trisolve() needs a square matrix L as its first argument"),
        ("sum(trisolve(M, w))", "trisolve(L, b) needs b of length 3 or an 3-row matrix (L is 3x3)"),
        ("log_mvnormal(w, 0, M)", "needs y of length 3 (cov is 3x3), got a vector of length 2"),
        ("log_mvnormal(v, w, M)", "needs mean a scalar or of length 3, got a vector of length 2"),
        ("log_mvnormal(v, 0, B)", "log_mvnormal() needs a square matrix cov as its third argument"),
        ("sum(M + B)", "shape mismatch in +/-: a 3x2 matrix and a 3x3 matrix"),
        ("sum((B + v) @ w)", "a vector of length 3 and a 3x2 matrix (a vector meets a matrix as each of its rows"),
        ("sum(M)", "sum() reduces a vector but got a 3x3 matrix"),
        ("dot(M, v)", "dot() needs two vectors"),
        ("logdet(M)[0]", "only x and params can be subscripted"),
        ("cholesky(M)", "must give one number per particle but gives a 3x3 matrix"),
        ("logdet(eye(x[0]))", "eye(n) needs a positive integer literal n"),
        ("logdet(eye(s))", "eye(n) needs a positive integer literal n"),
        ("logdet(eye(0))", "eye(n) needs a positive integer literal n"),
        ("logdet(eye(2.0))", "eye(n) needs a positive integer literal n"),
        ("logdet(eye(True))", "eye(n) needs a positive integer literal n"),
        ("logdet(eye(" + "9" * 40 + "))", "is over the cap of"),
        ("logdet(eye(3), 1)", "logdet takes 1 argument, got 2"),
        ("logdet(A=M)", "keyword arguments are not allowed (in logdet(...))"),
        ("trisolve(M, b=v)", "keyword arguments are not allowed"),
        ("logdet(M).T", "attribute access is not allowed"),
        ("cholesky(M).__class__", "attribute access is not allowed"),
        ("logdet(*M)", "* unpacking is not allowed"),
        ("logdet(M @ M)", "@ cannot combine"),
    ],
)
def test_shape_errors_name_the_function_and_position(source: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_expression(source, 3, SHAPES)
    assert message in str(caught.value)
    # through the public path: a 422 target_invalid at log_prob
    params = {"v": [1.0, 2, 3], "w": [1.0, 2], "M": np.eye(3).tolist(), "B": np.ones((3, 2)).tolist(), "s": 1.0}
    with pytest.raises(errors.TargetInvalid) as invalid:
        validate_job_spec({"method": "svgd", "target": {"kind": "expression", "dim": 3, "log_prob": source,
                                                         "params": params}})
    assert invalid.value.loc == ("target", "log_prob")


def test_the_size_caps_hold_at_their_boundaries() -> None:
    side = math.isqrt(MAX_VALUE_ELEMENTS)  # 2048: a side x side matrix is exactly one value at the cap
    assert side * side == MAX_VALUE_ELEMENTS
    parsed = parse_expression("logdet(sqdist(t, t) + eye(2048))", 1, {"t": (side,)})
    assert 0 < parsed.footprint <= MAX_TOTAL_ELEMENTS
    with pytest.raises(ValueError, match=r"col 8: this gives a 2049x2049 matrix \(4,198,401 numbers per particle\), "
                                         r"over the cap of 4,194,304"):
        parse_expression("logdet(sqdist(t, t))", 1, {"t": (side + 1,)})
    with pytest.raises(ValueError, match="over the cap"):
        parse_expression("logdet(eye(2049))", 1)
    with pytest.raises(ValueError, match="over the cap"):
        parse_expression("sum(sqdist(c, w) @ w)", 1, {"c": (MAX_VALUE_ELEMENTS,), "w": (2,)})
    # a 2,000,000-row data column (the upload cap) is one value under the cap
    parse_expression("sum(log_normal(y, c * x[0], 1))", 1, {"y": (2_000_000,), "c": (2_000_000,)})
    # many values at the cap together go over the total
    many = " + ".join(["logdet(sqdist(t, t) + eye(2048))"] * 4)
    with pytest.raises(ValueError, match=f"over the cap of {MAX_TOTAL_ELEMENTS:,} for the whole expression"):
        parse_expression(many, 1, {"t": (side,)})


def test_large_matrix_expressions_are_evaluated_in_chunks_with_the_same_values() -> None:
    n_obs = 200
    t = np.linspace(0, 10, n_obs)
    y = np.sin(t)
    source = GP.replace("eye(12)", f"eye({n_obs})")
    target = build(source, 3, {"y": y, "t": t})
    footprint = target.compiled.expression.footprint
    assert footprint > 8 * n_obs * n_obs
    assert target.chunk_rows == max(1, EVAL_CHUNK_ELEMENTS // footprint)
    x = np.tile(XS, (target.chunk_rows // len(XS) + 2, 1))  # more rows than one chunk
    assert len(x) > target.chunk_rows
    lp, score = target.log_prob_and_score(torch.from_numpy(x))
    whole = target.compiled.evaluate(torch.from_numpy(x), target.params, target.constants)
    np.testing.assert_allclose(lp.numpy(), whole.numpy(), rtol=1e-13)
    np.testing.assert_allclose(lp.numpy()[: len(XS)], [gp_reference(row, t, y) for row in XS], rtol=1e-9)
    np.testing.assert_allclose(score.numpy()[: len(XS)], target.score(torch.from_numpy(XS)).numpy(), rtol=1e-12)


# --- hostile inputs with the new functions: nothing runs but the compiled ops ---------------------------


class _Audit:
    def __init__(self) -> None:
        self.active, self.thread, self.events = False, None, []

    def __call__(self, event: str, args: tuple) -> None:
        if self.active and threading.get_ident() == self.thread and event.split(".")[0] in (
            "open", "os", "subprocess", "exec", "import", "socket", "ctypes", "pickle", "marshal", "shutil"
        ):
            self.events.append((event, args))


_AUDIT = _Audit()
sys.addaudithook(_AUDIT)


@pytest.mark.timeout(60)
def test_matrix_payloads_touch_no_files_processes_or_interpreter() -> None:
    params = {"y": Y.tolist(), "t": T.tolist(), "P": INDEFINITE.tolist()}
    payloads = [GP, "logdet(P) + x[0]", "log_mvnormal(y, 0, sqdist(t, t))", "cholesky(P).__class__",
                "logdet(eye(10**9))", "sum(trisolve(P, t))", "logdet(__import__('os'))"]

    def exercise() -> int:
        rejected = 0
        for source in payloads:
            try:
                spec = validate_job_spec({"method": "svgd", "target": {"kind": "expression", "dim": 3,
                                                                       "log_prob": source, "params": params}})
            except errors.TargetInvalid:
                rejected += 1
                continue
            target = build_target(spec.target)
            x = torch.linspace(-1, 1, 9, dtype=torch.float32).reshape(3, 3)
            target.log_prob(x)
            target.score(x)
        return rejected

    exercise()  # warm: lazy imports
    _AUDIT.thread, _AUDIT.events = threading.get_ident(), []
    _AUDIT.active = True
    try:
        rejected = exercise()
    finally:
        _AUDIT.active = False
    assert rejected == 4
    assert _AUDIT.events == []


def test_the_worked_gp_example_in_the_api_docs_parses_and_agrees_with_its_factor_form() -> None:
    import json
    import re
    from pathlib import Path

    from inference_core.datasets.columns import DatasetShape
    from inference_core.schemas.targets import ExpressionTargetSpec

    text = (Path(__file__).resolve().parents[3] / "docs" / "api.md").read_text()
    section = text[text.index("A Gaussian-process regression with a squared-exponential kernel"):]
    example, by_hand = re.findall(r"```(?:json)?\n(.*?)```", section, re.S)[:2]
    dataset = "ds_" + "a" * 32
    job = json.loads(example.replace("ds_…", dataset))
    spec = ExpressionTargetSpec.model_validate(validate_job_spec(job).target)
    spec.check_dataset_shapes({dataset: DatasetShape(200, 1, True)})
    kernel = re.search(r"K = (.*)", by_hand).group(1)
    factor_form = by_hand.strip().splitlines()[-1].replace("K", f"({kernel})")
    t, y = np.linspace(0, 10, 200), np.cos(np.linspace(0, 10, 200))
    documented = job["target"]["log_prob"].removesuffix(" + sum(log_normal(x, 0, 1))")
    np.testing.assert_allclose(evaluate(documented, XS, {"t": t, "y": y}).numpy(),
                               evaluate(factor_form, XS, {"t": t, "y": y}).numpy(), rtol=1e-9)
    ard = re.search(r"`(sqdist\(t / exp\(x\[1:4\]\).*?)`", section).group(1)
    parse_expression(f"sum({ard} @ y)", 4, {"t": (200, 3), "y": (200,)})
