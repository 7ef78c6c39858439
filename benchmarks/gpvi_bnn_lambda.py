"""Why is GPVI's Figure 1 band too wide on the data? A measurement of the λz term of f(z) = g(z[:k]) + λz.

Runs GPVI (`helper: "matrix"`) on the 1-D regression of the GPVI paper's Figure 1, with the setting of
`reproduce_bnn_figures.py` (same data, network, prior, generator [32, 32], 100 draws, Adam 1e-3), once per
variant of the noise width k and of λ, and records per region the mean predictive sd of (a) the generator's
draws and (b) the same draws with the noise past the prefix set to zero, z[k:] = 0, which removes the part of
λz that g cannot see (the suspected floor: λ·z_i gives weight i an sd of at least λ whatever g learns).

    python benchmarks/gpvi_bnn_lambda.py --variants lam0.1,lam0.01          # resumable, one JSON record each
    python benchmarks/gpvi_bnn_lambda.py --variants k151 --device cuda

Results: benchmarks/results/bnn_figures/gpvi_lambda.json, keyed by variant (with @steps unless 20,000) (read by reproduce_bnn_figures.py for the doc).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from reproduce_bnn_figures import N_DRAWS, RESULTS, region_means, regression_setup  # noqa: E402

from inference_core import run  # noqa: E402

#: name → generator options over Figure 1's [32, 32] (k = 32 unless noise_dim says otherwise; d = 151). The first
#: study (2026-11-27) ran before eq. 9's expectation over the updated batch became the BNN default, so its variants
#: keep the independent batch z' they were measured with; the `same_` ones use the batch itself (today's default).
INDEPENDENT = {"_expectation": "independent"}
VARIANTS = {
    "lam0.1": {"lambda": 0.1, **INDEPENDENT},
    "lam0.1_trained": {"lambda": 0.1, "lambda_trainable": True, **INDEPENDENT},
    "lam0.03": {"lambda": 0.03, **INDEPENDENT},
    "lam0.01": {"lambda": 0.01, **INDEPENDENT},
    "lam0.01_trained": {"lambda": 0.01, "lambda_trainable": True, **INDEPENDENT},
    "lam0.001": {"lambda": 0.001, **INDEPENDENT},
    "k151": {"noise_dim": 151, **INDEPENDENT},  # k = d: no λ term (ALF)
    # Is it the matrix helper's inverse? The same generator with the exact k×k Jacobian solve, and the pairwise one.
    "exact_lam0.01": {"lambda": 0.01, "_method": "gpvi_exact", **INDEPENDENT},
    "pairwise_lam0.01": {"lambda": 0.01, "_helper": "pairwise", **INDEPENDENT},
    # With the expectation over the updated batch: which λ (2026-11-29).
    "same_lam0.01": {"lambda": 0.01, "_expectation": "same"},
    "same_lam0.003": {"lambda": 0.003, "_expectation": "same"},
    "same_lam0.001": {"lambda": 0.001, "_expectation": "same"},
    # The injective structure (generator.structure "coupling") at the new λ.
    "same_coupling_lam0.001": {"lambda": 0.001, "structure": "coupling", "_expectation": "same"},
}


def measure(name: str, steps: int, device: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    spec, target, grid, grid_std = regression_setup()
    st = target.standardization
    variant = dict(VARIANTS[name])
    method, helper = variant.pop("_method", "gpvi"), variant.pop("_helper", "matrix")
    expectation = variant.pop("_expectation")
    generator = {"hidden": [32, 32], "noise_dim": 32, **variant}
    options = {"generator": generator, "optimizer": {"name": "adam", "lr": 1e-3}, "expectation": expectation}
    if method == "gpvi":
        options["helper"] = helper
    job = {"method": method, "target": spec, "num_particles": N_DRAWS, "steps": steps, "seed": 0, "device": device,
           "options": options, "eval": {"ksd": False, "mmd": False}}
    started = time.perf_counter()
    result = run(job)
    wall = time.perf_counter() - started
    network = result.method.network.to("cpu")
    k, width = network.input_dim, network.noise_dim
    z = torch.randn(N_DRAWS, width, generator=torch.Generator().manual_seed(1), dtype=torch.float32)
    record = {"name": name, "method": method, "helper": helper if method == "gpvi" else None, "steps": steps, "device": device, "wall_s": round(wall, 1), "k": k, "d": target.dim, "expectation": expectation,
              "lambda_final": network.lam_float(), "generator": generator}
    for label, noise in (("full", z), ("prefix_only", torch.cat([z[:, :k], torch.zeros_like(z[:, k:])], 1))):
        with torch.no_grad():
            draws = network(noise.to(next(network.parameters()).dtype)).float()
            f = target.forward(draws, grid_std)[..., 0].double().numpy() * st.y_std + st.y_mean
        record[label] = {key: round(value, 4) for key, value in region_means({"grid": grid, "std": f.std(0)}).items()}
        if label == "full":
            record["std"] = np.round(f.std(0), 4).tolist()
            record["mean"] = np.round(f.mean(0), 4).tolist()
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS / "gpvi_lambda.json")
    args = parser.parse_args()
    for name in [v for v in args.variants.split(",") if v]:
        if name not in VARIANTS:
            parser.error(f"unknown variant {name!r}; known: {sorted(VARIANTS)}")
        records = json.loads(args.out.read_text()) if args.out.exists() else {}
        key = name if args.steps == 20_000 else f"{name}@{args.steps}"
        if key in records:
            continue
        print(f"{name} ...", flush=True)
        record = measure(name, args.steps, args.device, args.threads)
        records = json.loads(args.out.read_text()) if args.out.exists() else {}  # others may have written meanwhile
        records[key] = record
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(records, separators=(",", ":")) + "\n")
        print(json.dumps({k: v for k, v in record.items() if k not in ("std", "mean")}), flush=True)


if __name__ == "__main__":
    main()
