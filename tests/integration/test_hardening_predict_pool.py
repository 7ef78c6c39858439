"""Issue 15: `/predict` computes in the API's bounded compute pool, like `/sample`. With one compute thread
(`PARVIS_SAMPLE_CONCURRENCY=1`) a small prediction asked while a large one computes waits for it (it ran beside
it in the request threadpool before), while plain polls keep answering at once; answers are the same as those
of a lone request. Real API and worker processes, real HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import numpy as np
import pytest

from tests.support.stack import Stack, wait_for

pytestmark = pytest.mark.integration

RNG = np.random.default_rng(5)
X_TRAIN = RNG.uniform(-2, 2, size=(40, 2))
Y_TRAIN = np.sin(X_TRAIN[:, 0]) + 0.5 * X_TRAIN[:, 1] + 0.1 * RNG.standard_normal(40)
TARGET = {"kind": "bnn", "dataset": {"X": X_TRAIN.tolist(), "y": Y_TRAIN.tolist()}, "hidden": [8],
          "standardize": True, "noise": {"type": "fixed", "std": 0.2}}
X_NEW = RNG.uniform(-2, 2, size=(50, 2)).tolist()
SLOW_DRAWS = 100_000  # seconds of compute on one thread


def test_predict_waits_for_the_compute_pool_while_polls_do_not(make_stack: Callable[..., Stack]) -> None:
    # the slow request's 100,000 hypernetwork draws take ~180 MB to generate: over half the default request memory
    # budget (a 413 at once, app.api.routes.predict.check_draw_memory), so this stack allows them
    stack = make_stack("embedded", PARVIS_SAMPLE_CONCURRENCY="1", PARVIS_MAX_PREDICT_VALUES="10000000",
                       PARVIS_REQUEST_MEMORY_BYTES=str(1024**3))
    stack.start_worker()
    spec = {"method": "amortized_svgd", "target": TARGET, "num_particles": 16, "steps": 40, "seed": 2}
    job = stack.wait_status(stack.submit(spec).json()["id"], {"succeeded", "failed"}, timeout=300)
    assert job["status"] == "succeeded", (job["error"], stack.log_tail())
    wait_for(lambda: stack.client.get("/v1/health/ready").json().get("checks", {}).get("warm") is True, 60,
             what="the compute pool's warm-up")
    url = f"/v1/samplers/{job['sampler_id']}/predict"
    small = {"x": X_NEW[:3], "n": 5, "seed": 1}
    alone = stack.client.post(url, json=small)
    assert alone.status_code == 200, alone.text

    done: dict[str, float] = {}
    answers: dict[str, httpx.Response] = {}

    def ask(name: str, body: dict) -> None:
        with httpx.Client(base_url=stack.base_url, timeout=300) as client:
            answers[name] = client.post(url, json=body)
        done[name] = time.monotonic()

    slow = threading.Thread(target=ask, args=("slow", {"x": X_NEW, "n": SLOW_DRAWS, "seed": 3}))
    started = time.monotonic()
    slow.start()
    time.sleep(1.0)  # the large prediction holds the only compute thread
    assert "slow" not in done, "the large prediction must take longer than this test's head start"
    poll_seconds = []
    for _ in range(5):
        before = time.monotonic()
        assert stack.client.get(f"/v1/jobs/{job['id']}").status_code == 200
        poll_seconds.append(time.monotonic() - before)
    ask("small", small)
    slow.join(timeout=300)
    assert answers["slow"].status_code == 200 and answers["small"].status_code == 200, answers
    slow_seconds = done["slow"] - started
    # The small one was queued behind the large one (in the request threadpool it finished first, at once).
    assert done["small"] >= done["slow"] - 0.05, (done, slow_seconds)
    assert max(poll_seconds) < slow_seconds / 4, (poll_seconds, slow_seconds)
    assert answers["small"].json() == alone.json()  # same bits as a lone request
