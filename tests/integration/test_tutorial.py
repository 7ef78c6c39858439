"""docs/tutorial.md runs as written: its Python blocks, executed in order against a real embedded service (uvicorn
API + Celery worker, SQLite, filesystem queue), succeed, and what the text says of their results holds against
independent references: the banana's closed-form moments and exact highest-density regions, the noiseless curve
behind the BNN's data."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from benchmarks.tutorial_figures import bnn_summary, hdr_coverage, python_blocks, run_tutorial
from tests.support.stack import started_embedded

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    with started_embedded(tmp_path_factory.mktemp("tutorial")) as stack:
        try:
            yield run_tutorial(stack.base_url)
        except BaseException:
            print(stack.log_tail())
            raise


def test_banana_svgd_matches_the_closed_form_and_gpvi_gives_seeded_draws(tutorial: dict[str, Any]) -> None:
    sd = np.array([10.0, np.sqrt(1 + 2 * 0.03**2 * 10.0**4)])  # banana.py's moments, written out again
    svgd, gpvi = tutorial["svgd_draws"], tutorial["gpvi_draws"]
    assert svgd.shape == (200, 2) and gpvi.shape == (2000, 2)
    # SVGD: the tutorial says both scales come out close (robustness bars 0.15 / 0.25)
    assert np.all(np.abs(svgd.mean(0)) / sd < 0.15)
    assert np.all(np.abs(np.log(svgd.std(0) / sd)) < 0.25)
    # exact 90 % region: binomial sd of the share for 200 exact draws is 0.021
    assert abs(hdr_coverage(svgd, 10.0, 0.03)["0.9"] - 0.9) < 0.08
    # GPVI: right centre (within half an sd), fewer target evaluations than SVGD
    assert np.all(np.abs(gpvi.mean(0)) / sd < 0.5)
    comparison = tutorial["comparison"]
    assert comparison["gpvi"]["grad_evals"] < comparison["svgd"]["grad_evals"]
    assert comparison["svgd"]["grad_evals"] == 200 * 3000  # n scores per step, no diagnostics counted
    # the sampler is reproducible: the same seed gives the same draws
    api = tutorial["httpx"].Client(base_url=tutorial["URL"], timeout=60)
    again = api.post(f"/v1/samplers/{tutorial['sampler_id']}/sample", json={"n": 2000, "seed": 1}).json()["samples"]
    api.close()
    np.testing.assert_array_equal(np.asarray(again), gpvi)


def test_bnn_predictions_widen_in_the_gap_for_fsvgd(tutorial: dict[str, Any]) -> None:
    grid = tutorial["grid"]
    for answer in tutorial["predictions"].values():
        mean, std, epistemic = (np.asarray(answer[key]) for key in ("mean", "std", "std_epistemic"))
        low, high = np.asarray(answer["quantiles"])
        assert mean.shape == (len(grid),) and answer["quantile_levels"] == [0.05, 0.95]
        assert np.all(std >= epistemic) and np.all(low < mean) and np.all(mean < high)
    summary = bnn_summary(tutorial)
    for method in ("fsvgd", "svgd"):
        assert summary[method]["rmse_to_curve_over_data"] < 0.15  # noise sd 0.15 on 40 points
    gap, data = (summary["fsvgd"]["mean_epistemic_sd"][k] for k in ("gap |x| < 1.5", "data"))
    assert gap > 2 * data
    assert summary["svgd"]["mean_epistemic_sd"]["gap |x| < 1.5"] < gap


def test_client_block_gives_what_the_http_blocks_gave(tutorial: dict[str, Any]) -> None:
    """The `parvis` client's version of the steps (the tutorial's `py` block), where the client is installed:
    the same seeded jobs give the same draws and predictions as the plain HTTP calls."""
    pytest.importorskip("parvis.client")
    (block,) = python_blocks(fence="py")
    namespace = dict(tutorial)  # the variables of the blocks before (URL, banana, bnn, grid), a copy
    exec(compile(block, "tutorial.md, client block", "exec"), namespace)  # noqa: S102
    namespace["client"].close()
    for name in ("svgd_draws", "gpvi_draws"):
        assert isinstance(namespace[name], np.ndarray)
        np.testing.assert_allclose(namespace[name], tutorial[name], rtol=1e-4, atol=1e-4)
    assert set(namespace["trace"]) >= {"step", "wall_time_s", "grad_evals"}
    np.testing.assert_allclose(namespace["prediction"]["quantiles"], tutorial["predictions"]["fsvgd"]["quantiles"],
                               rtol=1e-4, atol=1e-4)
