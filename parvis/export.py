"""Draws as ArviZ `InferenceData` with named variables and dimensions, and as `.npy` / CSV files.

Names come from the target: a BNN's flat weight vector is split along its layout (`config.layout` of a
sampler, or the `layout` /v1/targets/validate reports for a job; `inference_core.schemas.models.mlp_layout`):
`layer0.weight` with dims (`layer0_out`, `layer0_in`), `layer0.bias` (`layer0_out`), then scalars such as
`log_noise_precision`. Other targets (a Gaussian, an `expression`, ...) name their particle `x`, as the
expression language does: one variable `x` with dim `x_dim` whose coordinates 0..d-1 are x[0]..x[d-1] in
ArviZ's summaries; `names=[...]` gives each coordinate its own scalar variable instead.

Particles and generator draws are independent draws, not Markov chains: they form one "chain" (chain-based
diagnostics such as R-hat do not apply; ESS equals the number of draws up to estimation noise).
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from parvis import calls
from parvis.errors import ParvisError

_LAYER_BLOCK = re.compile(r"^(layer\d+)\.(weight|bias)$")


def block_dims(name: str, shape: Sequence[int]) -> list[str]:
    """Dimension names of one layout block: a layer's weight [out, in] is (`layerL_out`, `layerL_in`) and its
    bias [out] (`layerL_out`), so a bias and its weight rows share a dimension; others `NAME_dim_i`."""
    match = _LAYER_BLOCK.match(name)
    if match and match.group(2) == "weight" and len(shape) == 2:
        return [f"{match.group(1)}_out", f"{match.group(1)}_in"]
    if match and match.group(2) == "bias" and len(shape) == 1:
        return [f"{match.group(1)}_out"]
    return [f"{name}_dim_{i}" for i in range(len(shape))]


def named_variables(draws: Any, layout: Sequence[dict[str, Any]] | None = None,
                    names: Sequence[str] | None = None) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """Split draws [chains, n, d] (or [n, d]) into named arrays [chains, n, *shape] and their dims."""
    array = np.asarray(draws)
    if array.ndim == 2:
        array = array[None]
    if array.ndim != 3:
        raise ParvisError("draws_invalid", f"draws must be [n, d] or [chains, n, d], not shape {array.shape}")
    chains, n, dim = array.shape
    if names is not None:
        if len(names) != dim or len(set(names)) != dim:
            raise ParvisError("names_invalid", f"give {dim} distinct names (one per coordinate), got {len(names)}")
        return {name: array[..., i] for i, name in enumerate(names)}, {name: [] for name in names}
    if not layout:
        return {"x": array}, {"x": ["x_dim"]}
    variables: dict[str, np.ndarray] = {}
    dims: dict[str, list[str]] = {}
    covered = 0
    for block in layout:
        shape = [int(s) for s in block["shape"]]
        size = int(np.prod(shape, dtype=np.int64))
        offset = int(block["offset"])
        if offset + size > dim:
            raise ParvisError("layout_invalid", f"layout block {block['name']} ends at {offset + size}, past the "
                              f"draws' {dim} coordinates")
        variables[block["name"]] = array[..., offset:offset + size].reshape(chains, n, *shape)
        dims[block["name"]] = block_dims(block["name"], shape)
        covered += size
    if covered != dim:
        raise ParvisError("layout_invalid", f"the layout covers {covered} of the draws' {dim} coordinates")
    return variables, dims


def to_inference_data(draws: Any, *, layout: Sequence[dict[str, Any]] | None = None,
                      names: Sequence[str] | None = None, group: str = "posterior") -> Any:
    """An `arviz.InferenceData` whose `group` holds the named variables (see the module docstring)."""
    try:
        import arviz
    except ImportError:
        raise ParvisError("arviz_missing", "ArviZ export needs arviz: pip install 'parvis[arviz]' "
                          "(or 'parvis-client[arviz]')") from None
    variables, dims = named_variables(draws, layout, names)
    coords = {"x_dim": np.arange(next(iter(variables.values())).shape[-1])} if "x_dim" in dims.get("x", []) else {}
    return arviz.from_dict(**{group: variables}, dims=dims, coords=coords)


def inference_data(ref: calls.JobRef, n: int | None = None, seed: int = 0,
                   names: Sequence[str] | None = None) -> calls.Operation:
    """A job's particles (or, with `n` or a sampler id, n seeded sampler draws) as InferenceData."""
    if n is not None or calls.job_id_of(ref).startswith("smp_"):
        draws = yield from calls.sample(ref, n or 1000, seed)
    else:
        draws = yield from calls.particles(ref)
    layout = None if names is not None else (yield from calls.layout_of(ref, draws.shape[-1]))
    return to_inference_data(draws, layout=layout, names=names)


def save_draws(draws: Any, path: str | Path) -> Path:
    """`.npy` (np.save, no pickle) or `.csv` (a header x[0],x[1],... or the given columns, one row per draw)."""
    path = Path(path)
    array = np.asarray(draws)
    if path.suffix == ".npy":
        np.save(path, array, allow_pickle=False)
    elif path.suffix == ".csv":
        table = array.reshape(len(array), -1)
        with open(path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow([f"x[{i}]" for i in range(table.shape[1])])
            writer.writerows(table.tolist())
    else:
        raise ParvisError("format_invalid", f"cannot write {path.name}: use a .npy or .csv file name")
    return path
