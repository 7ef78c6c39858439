"""POST /v1/targets/validate in the job's dtype (issue 14), in-process HTTP: a target finite in float64 but not
in float32 is flagged with `nonfinite_in_dtype`, float32 rounding beyond the documented tolerance with
`dtype_mismatch`; the dtype comes from the request, options.dtype, or the method's default."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.api.compute import DTYPE_RTOL
from tests.unit.test_api_jobs import assert_problem

# -exp(x0) overflows float32 (e^89 > 3.4e38) long before float64 (e^710); nothing to rewrite (no log).
OVERFLOW = {"kind": "expression", "dim": 2, "log_prob": "-0.5*sum(square(x)) - exp(x[0])"}
POINTS = [[0.0, 1.0], [100.0, 0.5]]


def validate(client: TestClient, **body) -> dict:
    response = client.post("/v1/targets/validate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_target_that_overflows_only_in_float32_is_finite_but_warned(client: TestClient) -> None:
    body = validate(client, target=OVERFLOW, points=POINTS)
    want = [-0.5 * (x0 * x0 + x1 * x1) - math.exp(x0) for x0, x1 in POINTS]
    np.testing.assert_allclose(body["log_prob"], want, rtol=1e-14)  # the float64 fields are as before
    assert body["finite"] is True and body["dtype"] == "float32" and body["finite_in_dtype"] is False
    assert body["log_prob_in_dtype"][0] == pytest.approx(want[0], rel=1e-6) and body["log_prob_in_dtype"][1] is None
    (warning,) = body["warnings"]
    assert warning["code"] == "nonfinite_in_dtype" and warning["points"] == [1]
    assert "log p at points 1" in warning["message"] and "score of point 1 at coordinates 0" in warning["message"]
    assert "float32" in warning["message"]

    in64 = validate(client, target=OVERFLOW, points=POINTS, dtype="float64")
    assert in64["dtype"] == "float64" and in64["finite_in_dtype"] is True and in64["warnings"] == []
    assert in64["log_prob_in_dtype"] == in64["log_prob"] == body["log_prob"]


@pytest.mark.parametrize(
    ("extra", "dtype"),
    [
        ({"method": "svgd"}, "float32"),
        ({"method": "nuts"}, "float64"),  # the MCMC baselines default to float64
        ({"method": "svgd", "options": {"dtype": "float64"}}, "float64"),
        ({"options": {"dtype": "float64"}}, "float64"),
        ({"method": "nuts", "options": {"dtype": "float32"}}, "float32"),
        ({"method": "nuts", "dtype": "float32"}, "float32"),
    ],
)
def test_the_dtype_follows_the_method_and_its_options(client: TestClient, extra: dict, dtype: str) -> None:
    body = validate(client, target=OVERFLOW, points=POINTS, **extra)
    assert body["dtype"] == dtype
    assert [w["code"] for w in body["warnings"]] == (["nonfinite_in_dtype"] if dtype == "float32" else [])


def test_float32_rounding_beyond_the_tolerance_is_a_dtype_mismatch(client: TestClient) -> None:
    # x + 1e8 rounds to 1e8 in float32 (its spacing there is 8), so the float32 value is 0, not 0.1
    target = {"kind": "expression", "dim": 1, "log_prob": "x[0] + 1e8 - 1e8 - 0.5*x[0]**2"}
    body = validate(client, target=target, points=[[0.1], [100.0]])
    assert body["finite"] is True and body["finite_in_dtype"] is True
    (warning,) = body["warnings"]
    assert warning["code"] == "dtype_mismatch" and warning["points"] == [0]  # at x = 100: 8 off in −4900
    assert str(DTYPE_RTOL["float32"]) in warning["message"]
    assert validate(client, target=target, points=[[0.1]], dtype="float64")["warnings"] == []


def test_the_issue_14_mixture_is_finite_in_float32_after_the_rewrite(client: TestClient) -> None:
    target = {"kind": "expression", "dim": 2, "params": {"theta": 0.3},
              "log_prob": "log(theta*exp(-500*sum(square(x - 1))) + (1 - theta)*exp(-500*sum(square(x + 1))))"}
    points = np.array([[0.0, 0.1], [2.0, -2.0], [0.5, 0.25]])  # log-components from −1000 to −5000
    body = validate(client, target=target, points=points.tolist())
    assert body["finite"] is True and body["finite_in_dtype"] is True and body["warnings"] == []
    a, b = -500 * ((points - 1) ** 2).sum(-1), -500 * ((points + 1) ** 2).sum(-1)
    want = np.logaddexp(math.log(0.3) + a, math.log(0.7) + b)
    np.testing.assert_allclose(body["log_prob"], want, rtol=1e-12)
    np.testing.assert_allclose(body["log_prob_in_dtype"], want, rtol=1e-6)


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"dtype": "float16"}, "request_invalid"),
        ({"method": "no_such_method"}, "method_unknown"),
        ({"method": "fvi"}, "method_unsupported_for_target"),
        ({"method": "svgd", "options": {"no_such_option": 1}}, "method_options_invalid"),
        ({"options": {"dtype": "float16"}}, "method_options_invalid"),
        ({"dtype": "float32", "options": {"dtype": "float64"}}, "spec_invalid"),
    ],
)
def test_bad_dtype_method_or_options_are_rejected(client: TestClient, extra: dict, code: str) -> None:
    assert_problem(client.post("/v1/targets/validate", json={"target": OVERFLOW, "points": POINTS, **extra}),
                   422, code)


def test_openapi_documents_the_new_fields(client: TestClient) -> None:
    schemas = client.get("/v1/openapi.json").json()["components"]["schemas"]
    assert {"dtype", "finite_in_dtype", "log_prob_in_dtype", "warnings"} <= schemas["ValidateResponse"]["properties"].keys()
    assert {"dtype", "method", "options"} <= schemas["ValidateRequest"]["properties"].keys()
    assert {"code", "message", "points"} <= schemas["ValidateWarning"]["properties"].keys()
