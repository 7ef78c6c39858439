"""Issue 44: one job run as k ranks of a torch.distributed process group (`inference_core.distributed`), on gloo.

Two ranks are started once (torch.multiprocessing's spawn context, a FileStore in a temporary folder) and run
every scenario in ONE process group, since starting processes costs seconds on two cores; each rank writes its
results to a file and the tests here compare them with one-rank runs of the same specs in this process. A second
pair of ranks tests a stalled peer.

Tolerances. Every spec runs in float64 (`options.dtype`), which makes tight bounds possible. The ranks' results are
not bit-identical to one rank's: each rank sums the direction's kernel terms over its own query rows against all n
(another blocking of the same sums, the points centred once more by the union's mean), and the generators' (and
helpers') gradients are the sums of the ranks' parts, all-reduced — the same terms added in another order.
Measured (max |Δ| of the final particles against one rank, on particles of size 1-4): float64 — particles
(svgd, svgd with IMQ, wsgld, pisgld; 20 steps) ≤ 8.9e-16, scores (gfsf 20 steps; ksd and ensemble on a BNN,
6 steps) exactly 0 (the scores are gathered, the rest is one rank's computation on every rank), networks (fsvgd,
fwsgld, fpisgld; 8 steps) ≤ 1.1e-16, data (mfvi on a minibatch and on all rows; 6-8 steps) ≤ 1.1e-16,
batch (gpvi with the matrix helper, the same-batch expectation, the pairwise helper, the coupling generator or
a trained λ, gpvi_exact, amortized_svgd both ways, amortized_gfsf, amortized_ksd, amortized_fsvgd; 4-8 steps)
≤ 2.4e-16 (several exactly 0); checkpoints resumed across k ≤ 4.4e-16. The same specs in float32 (not asserted here): ≤ 7.2e-7, 6.0e-8 and 1.2e-7.
Asserted: `ATOL` = 1e-10 for every family — about 10⁵ times the measured float64 differences, and tight on
purpose: Adam is blind to a global scale, so a rank dividing svgd's sums by n + 1 instead of n moved the final
particles by only 4.5e-9 (45 × ATOL).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from inference_core import errors, run
from inference_core.catalog import METHODS, resolve
from inference_core.distributed import (
    RANKED_METHODS,
    SINGLE_RANK,
    RankGroup,
    join_group,
    leave_group,
    shard_bounds,
)
from inference_core.serialization import state_from_bytes
from inference_core.spec import validate_job_spec
from inference_core.training import RunHooks, build_method
from tests.support.resume import StopAt

ATOL = 1e-10
WORLD = 2

_rng = np.random.default_rng(3)
_X = _rng.normal(size=(40, 3))
_Y = np.sin(_X[:, 0]) + 0.5 * _X[:, 1] + 0.1 * _rng.normal(size=40)
BNN = {"kind": "bnn", "dataset": {"X": _X.tolist(), "y": _Y.tolist()}, "standardize": True, "hidden": [8],
       "prior_std_scaling": "fan_out", "noise": {"type": "inverse_gamma_std"}, "batch_size": 16}
GAUSSIAN_2D = {"kind": "gaussian", "mean": [1.0, -2.0], "cov": [[1.0, 0.8], [0.8, 2.0]]}
GAUSSIAN_3D = {"kind": "gaussian", "mean": [0.5, -1.0, 0.2],
               "cov": [[1.0, 0.3, 0.0], [0.3, 2.0, 0.1], [0.0, 0.1, 0.5]]}


def particle_spec(method: str, **options: Any) -> dict[str, Any]:
    # 31 particles: 16 + 15 rows on two ranks (uneven shards)
    return {"method": method, "target": GAUSSIAN_2D, "num_particles": 31, "steps": 20, "seed": 11,
            "options": {"dtype": "float64", "optimizer": {"name": "adam", "lr": 0.05}, **options}}


def network_spec(method: str, **options: Any) -> dict[str, Any]:
    # 7 networks (4 + 3), a BNN regression with a learnt noise (the σ step runs too)
    return {"method": method, "target": BNN, "num_particles": 7, "steps": 8, "seed": 5,
            "options": {"dtype": "float64", "extra_points": 6, **options}, "eval": {"ksd": False, "mmd": False}}


def batch_spec(method: str, **options: Any) -> dict[str, Any]:
    # a batch of 9 (5 + 4); k = 2 < d = 3 with a hidden layer: the block form's coupling, the helper VJPs and J_φ run
    return {"method": method, "target": GAUSSIAN_3D, "num_particles": 9, "steps": 8, "seed": 3,
            "options": {"dtype": "float64", "generator": {"hidden": [5], "noise_dim": 2, "activation": "tanh"},
                        **options}}


HELPER = {"hidden_width": 6, "hidden_layers": 1}
SPECS: dict[str, dict[str, Any]] = {
    "svgd": particle_spec("svgd"),
    "svgd_imq": particle_spec("svgd", kernel={"name": "imq"}),
    "wsgld": particle_spec("wsgld", optimizer={"name": "adam", "lr": 0.02}),
    "pisgld": particle_spec("pisgld", optimizer={"name": "sgd", "lr": 0.02, "momentum": 0.5}),
    # "scores": the ranks split the scores, every rank the whole solve (gfsf) or critic (ksd, on a BNN's minibatch)
    "gfsf": particle_spec("gfsf"),
    "ksd": {**particle_spec("ksd", critic={"hidden": [8], "steps": 2}), "target": BNN, "num_particles": 7,
            "steps": 6, "eval": {"ksd": False, "mmd": False}},
    # the members split, each with its own minibatch (drawn in order from the shared generator on every rank)
    "ensemble": {**particle_spec("ensemble", independent_batches=True), "target": BNN, "num_particles": 7,
                 "steps": 6, "eval": {"ksd": False, "mmd": False}},
    "fsvgd": network_spec("fsvgd"),
    "fwsgld": network_spec("fwsgld", pullback="vjp"),
    "fpisgld": network_spec("fpisgld"),
    "gpvi": batch_spec("gpvi", helper_network={**HELPER, "probes": 3}),
    "gpvi_same": batch_spec("gpvi", expectation="same", helper_network={**HELPER, "steps": 2}),
    "gpvi_pairwise": batch_spec("gpvi", helper="pairwise", expectation_particles=7, helper_network=HELPER),
    "gpvi_exact": batch_spec("gpvi_exact"),
    # the injective "coupling" generator (its exact top block per z'), 4 steps: its Jacobians are slow to form
    "gpvi_coupling": {**batch_spec("gpvi", generator={"hidden": [5], "noise_dim": 2, "activation": "tanh",
                                                      "structure": "coupling"}), "steps": 4},
    # a trained λ: its gradient is all-reduced with the generator's
    "gpvi_lambda": batch_spec("gpvi", precondition="none",
                              generator={"hidden": [], "noise_dim": 2, "lambda": 0.8, "lambda_trainable": True}),
    "amortized_svgd": batch_spec("amortized_svgd", expectation_particles=8),
    # the whole φ on every rank from gathered rows (GFSF's solve; KSD's critic trained on gathered scores)
    "amortized_gfsf": batch_spec("amortized_gfsf"),
    "amortized_ksd": batch_spec("amortized_ksd", critic={"hidden": [8], "steps": 2}),
    "amortized_svgd_same": batch_spec("amortized_svgd", expectation="same"),
    # f-SVGD's function-space direction whole on every rank from the gathered draws; the shared σ's held-out step
    "amortized_fsvgd": {**network_spec("amortized_fsvgd", generator={"hidden": [5], "noise_dim": 4,
                                                                      "activation": "tanh"}), "num_particles": 9},
    # data parallel: the minibatch's 15 rows split 8 + 7 (all 40 rows 20 + 20), 3 draws of ε; the prior and the
    # entropy on rank 0
    "mfvi": {"method": "mfvi", "target": {**BNN, "batch_size": 15}, "num_particles": 7, "steps": 8, "seed": 2,
             "options": {"dtype": "float64", "mc_samples": 3}, "eval": {"ksd": False, "mmd": False}},
    "mfvi_full_data": {"method": "mfvi", "target": {**BNN, "batch_size": None}, "num_particles": 7, "steps": 6,
                       "seed": 2, "options": {"dtype": "float64", "entropy": "monte_carlo"},
                       "eval": {"ksd": False, "mmd": False}},
}

def repeated_setup(spec: dict[str, Any]) -> bool:
    """Whether the method's construction evaluates the target (GPVI's default whitening by Pathfinder, precondition
    "auto"; a baseline's check that the target has a log density, one row), which every rank repeats."""
    return (spec["method"] == "gpvi" and spec["options"].get("precondition", "auto") != "none"
            or spec["method"] in ("ensemble", "mfvi"))

#: checkpoint scenarios: (spec name, checkpoint_every, stop after step, steps)
CHECKPOINTED = {"svgd": (5, 12, 20), "fsvgd": (3, 5, 8), "gpvi": (3, 5, 8)}


def checkpointed_spec(name: str) -> dict[str, Any]:
    every, _, steps = CHECKPOINTED[name]
    return {**SPECS[name], "checkpoint_every": every, "steps": steps}


class Recorder(RunHooks):
    """Keeps the last step's metrics."""

    def __init__(self) -> None:
        self.metrics: dict[str, float] = {}

    def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
        self.metrics = dict(metrics)


# ---- the ranks ---------------------------------------------------------------------------------------------------

def _start(rank: int, timeout_s: float, store: str) -> RankGroup:
    torch.set_num_threads(1)
    return join_group(dist.FileStore(store, WORLD), rank, WORLD, timeout_s=timeout_s, device="cpu")


def _session(rank: int, store: str, out: str, one_rank_checkpoints: dict[str, bytes]) -> None:
    """Every scenario in one process group; results to `out`/rank{rank}.pt, then "done" once the group is left."""
    group = _start(rank, 60.0, store)
    results: dict[str, Any] = {}
    try:
        results["gather"] = group.all_gather_rows(torch.full((3 - rank, 2), float(rank)))  # sizes exchanged
        results["gather_total"] = group.all_gather_rows(torch.arange(5.0)[slice(*group.bounds(5))], 5)
        summed = [torch.full((2,), rank + 1.0), torch.tensor([rank], dtype=torch.int64)]
        group.all_reduce_sum_(summed)
        results["reduce"] = summed
        results["object"] = group.broadcast_object({"from": rank})
        results["stop"] = [group.agree_stop("cancelled" if rank == 0 else None),
                           group.agree_stop(None if rank == 0 else "ignored on rank 1")]
        group.barrier()
        for name, spec in SPECS.items():
            hooks = Recorder()
            result = run(spec, hooks=hooks, group=group)
            results[name] = {"particles": result.particles, "steps": result.steps_completed,
                             "final": result.final_metrics, "quality": result.quality, "last": hooks.metrics,
                             "sampler": result.method.sampler() is not None if rank == 0 else None}
        for name, (_, stop, _) in CHECKPOINTED.items():
            hooks = StopAt(stop)
            stopped = run(checkpointed_spec(name), hooks=hooks, group=group)
            resumed = run(checkpointed_spec(name), group=group,
                          resume_state=state_from_bytes(one_rank_checkpoints[name]))
            results[f"checkpoint/{name}"] = {"steps": stopped.steps_completed, "stopped": stopped.stopped,
                                             "checkpoints": hooks.checkpoints, "resumed": resumed.particles}
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        leave_group(group)
        leave_group(group)  # idempotent
    Path(out, f"done{rank}").touch()


def _stalled_peer(rank: int, store: str, out: str) -> None:
    """Rank 1 joins, then stalls past the timeout without entering the collective, then dies without leaving."""
    group = _start(rank, 3.0, store)
    group.barrier()
    if rank == 1:
        time.sleep(6.0)
        os._exit(0)
    started = time.monotonic()
    try:
        group.all_gather_rows(torch.ones(2, 2), 4)
        outcome = "returned"
    except Exception as exc:  # noqa: BLE001 - any error is the point; the test reads its kind
        outcome = f"{type(exc).__name__}: {exc}"
    torch.save({"outcome": outcome, "elapsed": time.monotonic() - started}, Path(out) / "rank0.pt")
    leave_group(group)


def _spawn(fn: Any, *args: Any, timeout: float = 240.0) -> list[int | None]:
    """Start WORLD ranks of `fn(rank, *args)` (spawn context) and wait; returns their exit codes."""
    ctx = mp.get_context("spawn")
    processes = [ctx.Process(target=fn, args=(rank, *args), daemon=True) for rank in range(WORLD)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join()
    return [process.exitcode for process in processes]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("ranks")
    one_rank_checkpoints = {}
    for name, (every, stop, _) in CHECKPOINTED.items():
        hooks = StopAt(stop)
        run(checkpointed_spec(name), hooks=hooks)
        one_rank_checkpoints[name] = hooks.checkpoints[every]
    codes = _spawn(_session, str(out / "store"), str(out), one_rank_checkpoints)
    assert all((out / f"done{rank}").exists() for rank in range(WORLD)), codes
    assert codes == [0] * WORLD  # and both exited cleanly (no abort at exit: RankGroup._collective)
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]


@pytest.fixture(scope="module")
def one_rank() -> dict[str, Any]:
    results = {}
    for name, spec in SPECS.items():
        hooks = Recorder()
        result = run(spec, hooks=hooks)
        results[name] = {"particles": result.particles, "final": result.final_metrics, "last": hooks.metrics}
    return results


# ---- the collectives -----------------------------------------------------------------------------------------

def test_shard_bounds_are_contiguous_blocks_the_first_ranks_one_row_more() -> None:
    assert [shard_bounds(7, r, 3) for r in range(3)] == [(0, 3), (3, 5), (5, 7)]
    assert [shard_bounds(2, r, 3) for r in range(3)] == [(0, 1), (1, 2), (2, 2)]
    for n in range(0, 30):
        for k in range(1, 6):
            bounds = [shard_bounds(n, r, k) for r in range(k)]
            assert bounds[0][0] == 0 and bounds[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
            sizes = [stop - start for start, stop in bounds]
            assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1
    with pytest.raises(ValueError):
        shard_bounds(5, 2, 2)


def test_one_rank_collectives_are_the_identity_without_a_process_group() -> None:
    t = torch.randn(3, 2)
    assert SINGLE_RANK.is_root and SINGLE_RANK.world_size == 1 and not dist.is_initialized()
    assert SINGLE_RANK.all_gather_rows(t) is t and SINGLE_RANK.all_gather_rows(t, 3) is t
    tensors = [t]
    assert SINGLE_RANK.all_reduce_sum_(tensors) is tensors and torch.equal(tensors[0], t)
    assert SINGLE_RANK.broadcast_object(obj := {"a": 1}) is obj
    assert SINGLE_RANK.agree_stop("cancelled") == "cancelled" and SINGLE_RANK.agree_stop(None) is None
    SINGLE_RANK.barrier()
    group = join_group(dist.HashStore(), 0, 1, timeout_s=5.0, device="cpu")
    assert group.world_size == 1 and group.backend is None and not dist.is_initialized()
    leave_group(group)


def test_the_collectives_on_two_ranks(ranks: list[dict[str, Any]]) -> None:
    for result in ranks:
        torch.testing.assert_close(result["gather"], torch.tensor([[0.0, 0.0]] * 3 + [[1.0, 1.0]] * 2))
        assert torch.equal(result["gather_total"], torch.arange(5.0))
        assert torch.equal(result["reduce"][0], torch.full((2,), 3.0))
        assert torch.equal(result["reduce"][1], torch.tensor([1]))
        assert result["object"] == {"from": 0}
        # rank 0's answer, whatever rank 1 says
        assert result["stop"] == ["cancelled", None]


# ---- the methods: one rank's results, shared by two -----------------------------------------------------------

def test_the_ranked_methods_are_the_ones_that_share_their_work() -> None:
    for name, info in METHODS.items():
        cls = resolve(info.builder)
        assert getattr(cls, "rank_sharing", None) == RANKED_METHODS.get(name), name
    # every ranked method is compared with one rank below (family by family)
    assert {spec["method"] for spec in SPECS.values()} == set(RANKED_METHODS)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_two_ranks_give_the_one_rank_result(name: str, ranks: list[dict[str, Any]], one_rank: dict[str, Any]
                                            ) -> None:
    spec = SPECS[name]
    assert spec["num_particles"] % WORLD == 1  # uneven shards
    root, other = ranks[0][name], ranks[1][name]
    expected = one_rank[name]
    assert root["steps"] == other["steps"] == spec["steps"]
    torch.testing.assert_close(root["particles"], expected["particles"], atol=ATOL, rtol=0)
    assert not torch.equal(expected["particles"], run({**spec, "steps": 1}).particles)  # they moved
    # every rank holds the same parameters (the same updates on every rank)
    assert torch.equal(other["particles"], root["particles"])
    # rank 0 reports the job: the final evaluation and quality block of one rank; the others report none
    assert root["final"].keys() == expected["final"].keys() and root["quality"]
    for key, value in expected["final"].items():
        if key != "grad_evals":
            assert root["final"][key] == pytest.approx(value, rel=1e-6, abs=1e-9), key
    # grad_evals: the ranks' evaluations summed — the steps' as one rank's; a set-up every rank repeats (GPVI's
    # Pathfinder whitening here, the ensemble's log-density check) counts once per rank
    if repeated_setup(spec):
        assert root["final"]["grad_evals"] > expected["final"]["grad_evals"]
    else:
        assert root["final"]["grad_evals"] == expected["final"]["grad_evals"]
    assert other["final"] == {} and other["quality"] == {} and other["last"] == {}
    assert root["last"].keys() == expected["last"].keys()
    for key in ("stein_force_norm", "function_force_norm", "repulsion_norm", "direction_norm", "bandwidth",
                "helper_loss", "noise_std"):
        if key in expected["last"]:
            assert root["last"][key] == pytest.approx(expected["last"][key], rel=1e-9, abs=1e-12), key
    if METHODS[spec["method"]].family == "generative":
        assert root["sampler"]


# ---- stopping and checkpoints ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CHECKPOINTED))
def test_a_two_rank_checkpoint_is_the_one_rank_checkpoint_and_resumes_under_any_k(
        name: str, ranks: list[dict[str, Any]]) -> None:
    every, stop, steps = CHECKPOINTED[name]
    spec = checkpointed_spec(name)
    root, other = ranks[0][f"checkpoint/{name}"], ranks[1][f"checkpoint/{name}"]
    # rank 0's should_stop, agreed: both ranks stop before the same step
    assert root["stopped"] == other["stopped"] == "preempted"
    assert root["steps"] == other["steps"] == stop
    assert sorted(root["checkpoints"]) == list(range(every, stop + 1, every)) and other["checkpoints"] == {}
    hooks = StopAt(stop)
    run(spec, hooks=hooks)
    for step, blob in root["checkpoints"].items():
        _assert_same_state(state_from_bytes(blob), state_from_bytes(hooks.checkpoints[step]), path=(name, step))
    straight = run(spec).particles
    # a two-rank checkpoint resumed by one rank, and a one-rank checkpoint resumed by two
    resumed = run(spec, resume_state=state_from_bytes(root["checkpoints"][every])).particles
    torch.testing.assert_close(resumed, straight, atol=ATOL, rtol=0)
    torch.testing.assert_close(root["resumed"], straight, atol=ATOL, rtol=0)
    assert torch.equal(other["resumed"], root["resumed"])


def _assert_same_state(got: Any, expected: Any, path: tuple) -> None:
    """The same structure, types, shapes and dtypes; tensors within ATOL (evaluation counts: replicated set-up)."""
    assert type(got) is type(expected), path
    if isinstance(expected, dict):
        assert got.keys() == expected.keys(), path
        for key in expected:
            if key != "evaluations_spent":
                _assert_same_state(got[key], expected[key], (*path, key))
    elif isinstance(expected, list | tuple):
        assert len(got) == len(expected), path
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            _assert_same_state(a, b, (*path, i))
    elif isinstance(expected, torch.Tensor):
        assert got.shape == expected.shape and got.dtype == expected.dtype, path
        if expected.dtype == torch.uint8:  # RNG states: identical draws on every rank
            assert torch.equal(got, expected), path
        else:
            torch.testing.assert_close(got, expected, atol=ATOL, rtol=0, msg=str(path))
    else:
        assert got == expected, path


# ---- refusals and failures -----------------------------------------------------------------------------------

def test_a_method_that_cannot_share_its_work_refuses_two_ranks() -> None:
    spec = {"method": "hmc", "target": GAUSSIAN_2D, "num_particles": 8, "steps": 2}
    two = RankGroup(rank=0, world_size=2)  # refused before any collective: no process group is needed
    with pytest.raises(errors.ProcessesUnsupported, match="one process only") as caught:
        run(spec, group=two)
    assert caught.value.code == "processes_unsupported" and isinstance(caught.value, errors.SpecInvalid)
    method = build_method(validate_job_spec(spec))
    with pytest.raises(errors.ProcessesUnsupported):
        method.use_ranks(two)
    method.use_ranks(SINGLE_RANK)  # one rank: every method
    svgd = build_method(validate_job_spec({**spec, "method": "svgd", "num_particles": 3}))
    with pytest.raises(errors.ProcessesUnsupported, match="at least as many particles"):
        svgd.use_ranks(RankGroup(rank=0, world_size=4))
    # mfvi shares a data target's rows: none on a gaussian, at submit and when the ranks start
    mfvi = {**spec, "method": "mfvi"}
    with pytest.raises(errors.ProcessesUnsupported, match="shares a data target's rows"):
        validate_job_spec({**mfvi, "resources": {"processes": 2}})
    with pytest.raises(errors.ProcessesUnsupported, match="shares a data target's rows"):
        run(mfvi, group=two)


def test_a_collective_with_a_stalled_peer_raises_at_the_timeout(tmp_path: Path) -> None:
    _spawn(_stalled_peer, str(tmp_path / "store"), str(tmp_path), timeout=60.0)
    result = torch.load(tmp_path / "rank0.pt", weights_only=False)
    assert result["outcome"] != "returned"
    # the group's 3 s timeout, not the peer's death at 6 s
    assert 2.0 < result["elapsed"] < 5.5, result
