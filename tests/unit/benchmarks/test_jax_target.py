"""benchmarks/robustness/jax_target.py: an `expression` target's JAX log-density and its gradient equal the torch
target's (inference_core's compiler, autograd) in float64, on every suite problem and on every function of the
language, and it applies the compiler's log-sum-exp rewrite (the naive mixture stays finite where the IR as
written underflows)."""

from __future__ import annotations

import math

import pytest

jax = pytest.importorskip("jax")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks.robustness.jax_target import SUPPORTED, jax_log_density  # noqa: E402
from benchmarks.robustness.problems import problems  # noqa: E402
from benchmarks.robustness.scoring import load_reference  # noqa: E402
from inference_core.expression import FUNCTIONS  # noqa: E402
from inference_core.targets import BuildContext, build_target  # noqa: E402

RTOL = 1e-8


def torch_value_and_grad(spec: dict, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = torch.tensor(points, dtype=torch.float64, requires_grad=True)
    try:
        log_p = build_target(spec, BuildContext(dtype=torch.float64)).log_prob(x)
    except KeyError as exc:  # a function the parser knows and the torch compiler does not compile yet
        pytest.skip(f"the torch compiler has no {exc} yet: nothing to compare with")
    (grad,) = torch.autograd.grad(log_p.sum(), x)
    return log_p.detach().numpy(), grad.numpy()


def jax_value_and_grad(spec: dict, points: np.ndarray, stabilize: bool = True) -> tuple[np.ndarray, np.ndarray]:
    with jax.enable_x64(True):
        f = jax.jit(jax.value_and_grad(jax_log_density(spec, dtype=jnp.float64, stabilize=stabilize)))
        pairs = [f(jnp.asarray(p, dtype=jnp.float64)) for p in points]
        assert all(value.dtype == jnp.float64 for value, _ in pairs)
        return np.array([float(v) for v, _ in pairs]), np.stack([np.asarray(g) for _, g in pairs])


def assert_same(jax_pair: tuple[np.ndarray, np.ndarray], torch_pair: tuple[np.ndarray, np.ndarray]) -> None:
    (value, grad), (value_ref, grad_ref) = jax_pair, torch_pair
    assert np.isfinite(value_ref).all() and np.isfinite(grad_ref).all()
    np.testing.assert_allclose(value, value_ref, rtol=RTOL, atol=RTOL * np.abs(value_ref).max())
    for g, g_ref in zip(grad, grad_ref, strict=True):  # relative to each point's largest gradient component
        np.testing.assert_allclose(g, g_ref, rtol=RTOL, atol=RTOL * np.abs(g_ref).max())


def reference_moments(name: str) -> tuple[np.ndarray, np.ndarray]:
    """The stored reference's means and sds; for a problem with none yet its closed form, else N(0, (1/2)²) per
    coordinate (around where the samplers start)."""
    problem = problems()[name]
    try:
        reference = load_reference(name)
    except FileNotFoundError:
        reference = problem.closed_form or {"mean": [0.0] * problem.dim, "sd": [0.5] * problem.dim}
    return np.asarray(reference["mean"], dtype=np.float64), np.asarray(reference["sd"], dtype=np.float64)


@pytest.mark.parametrize("name", list(problems()))
def test_every_suite_problem_matches_the_torch_target(name: str) -> None:
    problem = problems()[name]
    mean, sd = reference_moments(name)
    rng = np.random.default_rng(41)
    points = mean + sd * rng.standard_normal((4, problem.dim))  # about one reference sd from the mean
    spec = problem.target_spec()
    assert_same(jax_value_and_grad(spec, points), torch_value_and_grad(spec, points))


def test_every_function_of_the_language_has_a_jax_counterpart() -> None:
    assert set(FUNCTIONS) <= SUPPORTED, sorted(set(FUNCTIONS) - SUPPORTED)


#: every function, node kind and broadcast of the language once (x in (0.1, 0.9)^4, where every density is defined)
ALL_LANGUAGE = (
    "sum(exp(x) + log(x) + log1p(x) + expm1(x) + sqrt(x) + square(x) + abs(x - 0.5) + sin(x) + cos(x) + tanh(x))"
    " + sum(sigmoid(x) + log_sigmoid(-x) + softplus(3 * x) + lgamma(x + 1))"
    " + sum(maximum(x, v) + minimum(x, v) + logaddexp(x, v) + clip(x, 0.2, 0.8))"
    " + sum(log_normal(x, v, 2) + log_laplace(x, v, 1.5) + log_cauchy(x, 0, s) + log_student_t(x, 4, v, 1))"
    " + sum(log_student_t(x, 100, 0, s) + log_gamma_pdf(x, 2, 3) + log_beta_pdf(x, 2, 3))"
    " + mean(x) + prod(x) + max(x) + min(x) + logsumexp(x) + norm(x) + dot(x, v)"
    " + sum(A @ x) + sum(x[0:3] @ A) + x @ v + dot(A[1], x) + A[2, 3] * x[0]"
    " + sum(x[::-1] * v) + sum(x[3:0:-2]) + x[-1] ** 3 + x[1] ** -2 + x[2] ** 0.5 - -x[0] / s"
    " + where((x[0] < 0.5) & (x[1] > 0.2) | ~(x[2] >= 0.9), x[3], -x[3])"
    " + where(0 < x[0] < 1, 1, 0) + sum(where(x != v, x, 0))"
    " + log(0.3 * exp(-50 * x[0]) + 0.7 * exp(x[1]) - exp(x[2]) / exp(x[3] + 5))"
    " + log(sum(v * exp(2 * x))) + log(mean(exp(x) ** 2)) + pi + e"
)


def test_every_function_matches_the_torch_target() -> None:
    rng = np.random.default_rng(7)
    spec = {"kind": "expression", "dim": 4, "log_prob": ALL_LANGUAGE,
            "params": {"v": [0.3, 0.7, 0.2, 0.5], "s": 1.3, "A": rng.normal(size=(3, 4)).tolist()}}
    points = rng.uniform(0.1, 0.9, (5, 4))
    assert_same(jax_value_and_grad(spec, points), torch_value_and_grad(spec, points))


def test_the_naive_mixture_is_stabilised_as_the_compiler_does() -> None:
    spec = problems()["mixture_naive"].target_spec()
    # both means ~10 below the data and sigma 0.05: every exp(log_normal(...)) underflows in float64
    points = np.array([[-10.0, 0.0, math.log(0.05), 0.3], [-12.0, 0.5, math.log(0.03), -1.0]])
    naive_value, _ = jax_value_and_grad(spec, points, stabilize=False)
    assert np.isneginf(naive_value).all()  # the IR as written: log(0)
    assert_same(jax_value_and_grad(spec, points), torch_value_and_grad(spec, points))


def test_float32_by_default_and_the_shape_is_checked() -> None:
    spec = problems()["ar2"].target_spec()
    log_density = jax_log_density(spec)
    with jax.enable_x64(False):
        value = log_density(jnp.zeros(4, dtype=jnp.float32))
    assert value.dtype == jnp.float32 and np.isfinite(float(value))
    with pytest.raises(ValueError, match="shape"):
        log_density(jnp.zeros(3))


#: the matrix functions (a Gaussian-process marginal likelihood and the rest), x = (log amplitude, log length
#: scale, log noise sd)
_K = "(exp(2 * x[0]) * exp(-0.5 * sqdist(X, X) / exp(2 * x[1])) + (exp(2 * x[2]) + 0.01) * eye(5))"
MATRIX_LANGUAGE = (
    f"log_mvnormal(y, 0.5, {_K}) + 0.1 * logdet({_K}) + sum(trisolve(cholesky({_K}), y))"
    f" + 0.01 * sum(diag({_K})) + sum(diag(y) @ y) + 0.1 * sum(sqdist(y, y[0:3]) @ x) + sum(trisolve(cholesky({_K}), X) @ w)"
)


def matrix_language_numpy(x: np.ndarray, X: np.ndarray, y: np.ndarray, w: np.ndarray) -> float:
    """MATRIX_LANGUAGE written directly in numpy / scipy (an independent reference)."""
    from scipy.linalg import solve_triangular
    from scipy.stats import multivariate_normal

    sq = ((X[:, None, :] - X[None, :, :]) ** 2).sum(-1)
    k = np.exp(2 * x[0]) * np.exp(-0.5 * sq / np.exp(2 * x[1])) + (np.exp(2 * x[2]) + 0.01) * np.eye(5)
    lower = np.linalg.cholesky(k)
    return float(multivariate_normal(np.full(5, 0.5), k).logpdf(y) + 0.1 * np.linalg.slogdet(k)[1]
                 + solve_triangular(lower, y, lower=True).sum() + 0.01 * np.trace(k) + (y * y).sum()
                 + 0.1 * ((y[:, None] - y[None, :3]) ** 2 @ x).sum() + (solve_triangular(lower, X, lower=True) @ w).sum())


def _matrix_spec() -> tuple[dict, np.ndarray]:
    rng = np.random.default_rng(11)
    X, y, w = rng.normal(size=(5, 2)), rng.normal(size=5), np.array([0.3, -0.7])
    spec = {"kind": "expression", "dim": 3, "log_prob": MATRIX_LANGUAGE,
            "params": {"X": X.tolist(), "y": y.tolist(), "w": w.tolist()}}
    return spec, rng.normal(0.0, 0.4, (3, 3))


def test_matrix_functions_match_numpy() -> None:
    spec, points = _matrix_spec()
    X, y, w = (np.asarray(spec["params"][k]) for k in ("X", "y", "w"))
    value, grad = jax_value_and_grad(spec, points)
    h = 1e-5
    for point, v, g in zip(points, value, grad, strict=True):
        assert v == pytest.approx(matrix_language_numpy(point, X, y, w), rel=1e-12)
        fd = [(matrix_language_numpy(point + h * e, X, y, w) - matrix_language_numpy(point - h * e, X, y, w)) / (2 * h)
              for e in np.eye(3)]
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


def test_matrix_functions_match_the_torch_target() -> None:
    spec, points = _matrix_spec()
    assert_same(jax_value_and_grad(spec, points), torch_value_and_grad(spec, points))


def test_a_matrix_that_is_not_positive_definite_gives_nan() -> None:
    spec = {"kind": "expression", "dim": 2, "log_prob": "logdet(diag(x)) + log_mvnormal(x, 0, diag(x))"}
    with jax.enable_x64(True):
        f = jax_log_density(spec)
        assert np.isfinite(float(f(jnp.array([1.0, 2.0]))))
        assert np.isnan(float(f(jnp.array([1.0, -2.0]))))


def test_the_benchmark_nuts_driver_is_numpyros_mcmc() -> None:
    """benchmarks/nuts_vs_auto.py compiles each chain as one scan of NUTS.init / NUTS.sample; MCMC.run with the same
    keys and starts takes the same tree sizes and the same draws up to float32 rounding (MCMC runs init op by op)."""
    pytest.importorskip("numpyro")
    from numpyro.infer import MCMC, NUTS

    from benchmarks.nuts_vs_auto import nuts_chain, start_points

    problem, warmup, draws, chains = problems()["ar2"], 30, 30, 2
    log_density = jax_log_density(problem.target_spec(), dtype=jnp.float32)

    def potential(z: jax.Array) -> jax.Array:
        return -log_density(z)

    starts = jnp.asarray(start_points(problem, 0)[:chains], dtype=jnp.float32)
    mcmc = MCMC(NUTS(potential_fn=potential), num_warmup=warmup, num_samples=draws, num_chains=chains,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), init_params=starts, extra_fields=("num_steps",))
    expected = np.asarray(mcmc.get_samples(group_by_chain=True))
    expected_steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"])
    _, chain = nuts_chain(potential, warmup, draws)
    compiled = jax.jit(chain).lower(starts[0], jax.random.PRNGKey(0)).compile()
    keys = jax.random.split(jax.random.PRNGKey(0), chains)
    runs = [compiled(starts[c], keys[c]) for c in range(chains)]
    np.testing.assert_array_equal(np.stack([np.asarray(r[1])[warmup:] for r in runs]), expected_steps)
    np.testing.assert_allclose(np.stack([np.asarray(r[0])[warmup:] for r in runs]), expected, atol=1e-4)
