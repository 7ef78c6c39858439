"""One job run as k ranks of a `torch.distributed` process group, with the math of one rank (issue 44).

    group = join_group(store, rank, world_size, timeout_s=300)   # gloo on the CPU, NCCL on CUDA
    try:
        result = inference_core.run(spec, hooks=hooks if group.is_root else None, group=group)
    finally:
        leave_group(group)

Every rank builds the method from the same spec and seed, so every rank starts from the same state; the methods
of `RANKED_METHODS` then share each step's work (`Method.use_ranks`, `Method.rank_sharing`):

* "particles" (`svgd`, `wsgld`, `pisgld`): each rank scores its own rows of the particles (`shard_bounds`),
  the scores are all-gathered, and each rank computes the direction of its own rows against all n (the O(n²)
  kernel sums split k ways); the gathered direction takes the same optimiser step on every rank, so every rank
  holds all particles and the same optimiser state;
* "scores" (`gfsf`, `ksd`, `ensemble`): each rank scores its own rows and the scores are all-gathered; the
  direction couples every particle (GFSF's linear solve, KSD's critic trained on all of them; an ensemble's is
  the scores themselves), so every rank computes all of it from the same inputs — the scores (a target over much
  data: most of a step) split k ways, the rest repeated;
* "networks" (`fsvgd`, `fwsgld`, `fpisgld`): the same with networks as particles: own networks' function values
  and scores, gathered, own rows' function-space direction and pull-back, gathered gradients;
* "batch" (`gpvi`, `gpvi_exact`, `amortized_svgd`, `amortized_gfsf`, `amortized_ksd`, `amortized_fsvgd`): every
  rank holds the whole generator (and helper or critic) and draws the whole noise batch; it forms its rows of the
  batch and of the expectation batch, the kernel sums' rows are gathered (GFSF's solve, KSD's critic and f-SVGD's
  function-space direction, which couple every row, are computed whole on every rank from the gathered rows and
  scores), and the generator's (and helper's) gradients
  are all-reduced — each rank's part of the 1/n mean — so every rank takes the same optimiser step;
* "data" (`mfvi`): data parallel — every rank holds the whole variational state and draws the same noise and
  minibatch, evaluates the log-likelihood of its share of the minibatch rows (rank 0 adds the prior and the
  entropy), and the gradients are all-reduced.

The training loop (`inference_core.training.run(..., group=...)`) consults `should_stop` on rank 0 and agrees the
answer on every rank (`RankGroup.agree_stop`), reports, checkpoints (in exactly the one-rank format) and evaluates
on rank 0 only. Results equal one rank's up to the order of floating-point additions in the shared sums (see
tests/unit/core/test_distributed.py for the tolerances measured per family).
"""

from __future__ import annotations

from inference_core.distributed.group import (
    SINGLE_RANK,
    RankGroup,
    default_backend,
    join_group,
    leave_group,
    shard_bounds,
)

#: The methods that can run one job as k > 1 ranks, and the rows they share (`Method.rank_sharing`). Every other
#: method refuses a group of more than one rank (`errors.ProcessesUnsupported`); the service rejects k > 1 for them
#: at submission. Each entry is tested against the one-rank run (tests/unit/core/test_distributed.py).
RANKED_METHODS: dict[str, str] = {
    "svgd": "particles",
    "wsgld": "particles",
    "pisgld": "particles",
    "gfsf": "scores",
    "ksd": "scores",
    "ensemble": "scores",
    "fsvgd": "networks",
    "fwsgld": "networks",
    "fpisgld": "networks",
    "gpvi": "batch",
    "gpvi_exact": "batch",
    "amortized_svgd": "batch",
    "amortized_gfsf": "batch",
    "amortized_ksd": "batch",
    "amortized_fsvgd": "batch",
    "mfvi": "data",
}


def supports_ranks(method: str) -> bool:
    """Whether `method` (a catalog name) can run as more than one rank."""
    return method in RANKED_METHODS


__all__ = [
    "RANKED_METHODS",
    "SINGLE_RANK",
    "RankGroup",
    "default_backend",
    "join_group",
    "leave_group",
    "shard_bounds",
    "supports_ranks",
]
