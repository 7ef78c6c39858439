"""Speed of the generative methods on the CPU; writes the `## Generative methods (CPU)` section of
docs/benchmarks.md (only that section is replaced).

    nice -n 10 python benchmarks/generative_speed.py            # full
    python benchmarks/generative_speed.py --quick               # fewer repeats (a smoke run; prints only)

1. `Sampler.sample(10000, seed)` for a trained 2-D GPVI generator (MLP 2→64→64→2, ReLU): median over repeats;
   also `load(zip)` + sample, and the ONNX graph under onnxruntime on the same noise, if installed.
2. Training-step time of GPVI (pairwise helper, matrix helper, exact solve) against amortised SVGD on the same
   generator and target, measured side by side in one run: the methods take turns, `--block` steps each, for
   `--rounds` rounds; the median per-step time of each method's blocks and its ratio to amortised SVGD.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from _timing import load_average, machine_summary, replace_section  # noqa: E402

from inference_core.methods.generative import gpvi_math  # noqa: E402
from inference_core.samplers import load  # noqa: E402
from inference_core.spec import validate_job_spec  # noqa: E402
from inference_core.training import build_method  # noqa: E402

SECTION = "Generative methods (CPU)"
DOC = ROOT / "docs" / "benchmarks.md"
GOAL_RATIO = 1.5


def bnn_dataset(n: int = 200, p: int = 8, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    return {"X": X.tolist(), "y": y.tolist()}


CONFIGS: list[dict[str, Any]] = [
    {"name": "2-D Gaussian, linear generator (Table 1 setting)",
     "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.5], [0.5, 2.0]]},
     "generator": {"hidden": []}},
    {"name": "2-D banana, MLP generator 2→64→64→2 (k = d, no λ)",
     "target": {"kind": "banana", "dim": 2},
     "generator": {"hidden": [64, 64]}},
    {"name": "BNN hypernetwork: regression MLP 8→50→1 (d = 502), generator 32→64→64→502 + 0.1·z, minibatch 32",
     "target": {"kind": "bnn", "dataset": bnn_dataset(), "hidden": [50], "batch_size": 32},
     "generator": {"hidden": [64, 64], "noise_dim": 32, "lambda": 0.1}},
    # The size the block form is for (d ≈ 10⁴); the pairwise helper's n·n'·d pair tensor is left out here.
    {"name": "BNN hypernetwork: regression MLP 8→100→100→1 (d = 11,101), generator 32→64→64→11,101 + 0.1·z, "
             "minibatch 32",
     "target": {"kind": "bnn", "dataset": bnn_dataset(), "hidden": [100, 100], "batch_size": 32},
     "generator": {"hidden": [64, 64], "noise_dim": 32, "lambda": 0.1}, "pairwise": False},
]
METHODS: list[tuple[str, str, dict[str, Any]]] = [
    ("amortized_svgd", "amortized SVGD (independent batch)", {}),
    ("gpvi", "GPVI, pairwise helper (default 32×3)", {"helper": "pairwise"}),
    ("gpvi", "GPVI, `helper: \"matrix\"`", {"helper": "matrix"}),
    ("gpvi_exact", "GPVI exact (`gpvi_exact`)", {}),
]


def build(method: str, target: dict, generator: dict, extra: dict, n: int, seed: int = 0):
    spec = {"method": method, "target": target, "num_particles": n, "steps": 1, "seed": seed, "device": "cpu",
            "options": {"generator": generator, "precondition": "none", **extra}}
    return build_method(validate_job_spec(spec))


def step_times(config: dict, n: int, rounds: int, block: int, pairwise: bool = True) -> list[tuple[str, float]]:
    """Median ms per step of each method (the pairwise helper only with `pairwise`)."""
    return interleaved_times([(label, build(method, config["target"], config["generator"], extra, n))
                              for method, label, extra in METHODS if pairwise or extra.get("helper") != "pairwise"],
                             rounds, block)


#: What `staged_matrix_helper(method, s)` keeps of the helper's work, by s.
HELPER_STAGES = ["no helper (P = I)", "+ helper forward P_η(z')", "+ residual loss and dL/dP (probes)",
                 "+ helper backward (dL/dη)"]


def staged_matrix_helper(method, stage: int):
    """A `helper: "matrix"` GPVI whose helper phase stops after HELPER_STAGES[stage] (no optimiser step): the
    directions then differ from GPVI's, but the work per step is the point, measured in context."""
    def helper_phase(jac, batch, lam):
        features_jacobian = batch["features_jacobian"]
        n_expect, k = jac.z_prefix.shape[0], jac.k
        if stage == 0:
            P = torch.eye(k, dtype=method.dtype).expand(n_expect, k, k)
        else:
            P = method.helper(jac.z_prefix)
        if stage >= 2:
            system = gpvi_math.top_system(jac.top_block(features_jacobian), lam)
            probes = torch.randn(method.options.helper_network.probes, n_expect, k, generator=method.rng,
                                 dtype=method.dtype)
            _, grad_P = gpvi_math.matrix_helper_loss(system, P, probes)
        if stage >= 3:
            method.helper.backward_into_grad(grad_P)
        drive, repulsion = method.matrix_terms(jac, P, features_jacobian, batch, lam)
        return drive, repulsion, 0.0
    method._matrix = helper_phase
    return method


#: The matrix helper's architecture before the default became one hidden layer (measured for comparison).
DEEP_MATRIX_HELPER = {"hidden_width": 32, "hidden_layers": 3}


def helper_cost_times(config: dict, n: int, rounds: int, block: int) -> list[tuple[str, float]]:
    """Amortised SVGD, the matrix helper's step cut after each stage, the full step, and the full step with
    the deeper helper, interleaved."""
    def matrix(helper_network: dict | None = None) -> Any:
        extra = {"helper": "matrix", **({"helper_network": helper_network} if helper_network else {})}
        return build("gpvi", config["target"], config["generator"], extra, n)
    built = [(METHODS[0][1], build(METHODS[0][0], config["target"], config["generator"], {}, n))]
    built += [(label, staged_matrix_helper(matrix(), stage)) for stage, label in enumerate(HELPER_STAGES)]
    built.append(("+ Adam step: GPVI, `helper: \"matrix\"`", matrix()))
    built.append(("the same with a 32 × 3 helper (the earlier default)", matrix(DEEP_MATRIX_HELPER)))
    return interleaved_times(built, rounds, block)


#: Untimed steps at the start of every block: the method before it (the pairwise helper's pair tensors above
#: all) leaves the caches cold, and a training run is a long series of one method's steps.
BLOCK_WARM_UP = 3


def interleaved_times(built: list[tuple[str, Any]], rounds: int, block: int) -> list[tuple[str, float]]:
    """Median ms per step of each built method, taken in turn `block` steps at a time (after BLOCK_WARM_UP
    untimed ones) for `rounds` rounds."""
    samples: dict[str, list[float]] = {label: [] for label, _ in built}
    for _ in range(rounds):
        for label, m in built:
            for _ in range(BLOCK_WARM_UP):
                m.step()
            started = time.perf_counter()
            for _ in range(block):
                m.step()
            samples[label].append(1e3 * (time.perf_counter() - started) / block)
    return [(label, statistics.median(samples[label])) for label, _ in built]


def median_time(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def sampler_section(repeats: int) -> list[str]:
    method = build("gpvi", {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.5], [0.5, 2.0]]},
                   {"hidden": [64, 64]}, {"helper": "matrix"}, 100)
    for _ in range(300):
        method.step()
    sampler = method.sampler()
    blob = sampler.to_zip_bytes()
    draw = median_time(lambda: sampler.sample(10_000, 7), repeats)
    reload_draw = median_time(lambda: load(blob).sample(10_000, 7), repeats)
    noise = median_time(lambda: sampler.sample_noise(10_000, 7), repeats)
    lines = [f"Trained 2-D GPVI generator (MLP 2→64→64→2, ReLU, `helper: \"matrix\"`, 300 steps on a 2-D "
             f"Gaussian), float32, median of {repeats} calls:", "",
             "| operation | time |", "|---|---|",
             f"| `Sampler.sample(10000, seed)` | {draw * 1e3:.2f} ms |",
             f"| of which `sample_noise(10000, seed)` | {noise * 1e3:.2f} ms |",
             f"| `load(zip_bytes).sample(10000, seed)` (rebuild + draw; zip {len(blob):,} bytes) | "
             f"{reload_draw * 1e3:.2f} ms |"]
    try:
        import onnxruntime as ort
    except ImportError:
        lines.append("| onnxruntime | not installed |")
    else:
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.log_severity_level = 3
        session = ort.InferenceSession(sampler.to_onnx_bytes(), options, providers=["CPUExecutionProvider"])
        z = sampler.sample_noise(10_000, 7).numpy()
        onnx_time = median_time(lambda: session.run(["samples"], {"z": z}), repeats)
        gap = float(np.abs(session.run(["samples"], {"z": z})[0] - sampler.sample(10_000, 7).numpy()).max())
        lines.append(f"| ONNX graph under onnxruntime {ort.__version__}, same noise (max |Δ| = {gap:.1e}) | "
                     f"{onnx_time * 1e3:.2f} ms |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--particles", type=int, nargs="+", default=[100, 1000],
                        help="batch sizes; the first with every method, the others without the pairwise helper")
    parser.add_argument("--large-n-rows", type=int, default=2, help="configs (in order) measured beyond the first n")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rounds, block, repeats = (4, 5, 5) if args.quick else (args.rounds, args.block, 25)
    load_before = load_average()
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    body = [f"Run {started} with `python benchmarks/generative_speed.py{' --quick' if args.quick else ''}`. "
            f"Machine: {machine_summary()}. Load average at start: {load_before}. The machine is shared; ratios are "
            "measured side by side in one run (methods interleaved), absolute times are indicative only.", "",
            "### Sampling", ""]
    body += sampler_section(repeats)
    first_n = args.particles[0]
    body += ["", "### Training step: GPVI against amortised SVGD on the same generator", "",
             "n particles per batch and an expectation batch of n for GPVI and amortised SVGD; every method builds the "
             f"identical generator from the same seed. {rounds} rounds of {block}·{first_n}/n timed steps (at least 1) "
             f"per method after {BLOCK_WARM_UP} untimed ones, taken in turn; median ms per step. Goal: GPVI ≤ {GOAL_RATIO}× amortised SVGD. The pairwise "
             f"helper is measured at n = {first_n} only (its cost grows with the n·n' helper evaluations) and not on the "
             "d ≈ 10⁴ hypernetwork (its pair tensor n·n'·d), the larger n "
             f"for the first {args.large_n_rows} generators only.", ""]
    for config_index, config in enumerate(CONFIGS):
        for n in args.particles:
            if n != first_n and config_index >= args.large_n_rows:
                continue
            times = step_times(config, n, rounds, max(1, block * first_n // n),
                               pairwise=n == first_n and config.get("pairwise", True))
            base = times[0][1]
            body += [f"**{config['name']}, n = {n}**", "", "| method | ms / step | × amortised SVGD | ≤ 1.5×? |",
                     "|---|---|---|---|"]
            for label, ms in times:
                ratio = ms / base
                ok = "—" if label == times[0][0] else ("yes" if ratio <= GOAL_RATIO else "**no**")
                body.append(f"| {label} | {ms:.2f} | {ratio:.2f}× | {ok} |")
            body.append("")
            print("\n".join(body[-len(times) - 3:]), flush=True)
    body += ["### Where the matrix helper's time goes", "",
             f"n = {first_n}, the same interleaved protocol: the `helper: \"matrix\"` step with its helper phase cut "
             "after each stage (the directions then differ; the work per step is what is timed, in context, "
             "not in an isolated loop). The added amounts are differences of medians and move by about ±0.1× from "
             "run to run; the totals are steadier.", ""]
    for config in CONFIGS[: args.large_n_rows]:
        times = helper_cost_times(config, first_n, rounds, block)
        base = times[0][1]
        body += [f"**{config['name']}**", "", "| step | ms / step | × amortised SVGD | added by this stage |",
                 "|---|---|---|---|"]
        for at, (label, ms) in enumerate(times):
            added = "—" if at < 2 or at == len(times) - 1 else f"{(ms - times[at - 1][1]) / base:+.2f}×"
            body.append(f"| {label} | {ms:.2f} | {ms / base:.2f}× | {added} |")
        body.append("")
        print("\n".join(body[-len(times) - 3:]), flush=True)
    body += [
        "Where GPVI's extra time goes (the structure of the step, not a measurement). On top of amortised SVGD's "
        "work (generator forward/backward, scores, an n×n' kernel reduction over 2d + 1 columns) a GPVI step forms "
        "J_φ(z'_j) at the n' expectation points, takes one helper update (`gpvi`) or n' k×k solves (`gpvi_exact`), "
        "and reduces kernel sums of per-point matrices, Σ_j K_ij P_j (k² columns) and, when k < d, "
        "Σ_j K_ij P_j J_φ(z'_j)ᵀ (k·m columns, m the generator's last hidden width), all in one pass over the "
        "kernel: d + k² + k·m + d + 2k + 1 columns against amortised SVGD's 2d + 1. "
        "(1) At n = 100 in 2-D the arithmetic is tiny and the step is a sequence of small tensor operations, "
        "each costing a few µs whatever its size (counted once with torch.profiler on the linear generator: "
        "about 147 per GPVI step against 103 for amortised SVGD; and a batched product of n' tiny matrices costs "
        "per matrix); the table above measures what each stage of the matrix helper adds. Changes made for it: "
        "every generative optimiser calls torch's fused Adam kernels directly (`methods/generative/optimizers.py`, "
        "bit-identical to `Adam.step`, whose per-call machinery cost about 30 µs a call: once per step in "
        "amortised SVGD, twice in GPVI); the matrix helper's default is one hidden layer of 32 instead of three "
        "(the last row above; Table 1 and 2 errors unchanged, docs/reproduction.md), as its update costs per "
        "layer, not per width (measured once in an isolated loop: forward, loss and backward took 166 µs with "
        "3 layers of width 4, 181 µs with 3 × 32, 122 µs with 1 × 32 and 126 µs with 1 × 64); its loss goes "
        "through the probes' Gram matrices (the same loss with every batched product k × k: 41 → 35 µs at "
        "k = 2, isolated loop); x' = f(z') reuses φ(z') from J_φ's forward pass; and J_φ's propagation applies "
        "ReLU's derivative mask in one operation per layer. With them the matrix helper is at the goal's edge "
        "here: its ratio moves by about ±0.05× between runs of this script. Also tried once, outside "
        "this script: the 32 × 3 helper's update compiled with torch.compile (inductor, CPU) took 157 µs against 178 µs "
        "eager after a 27 s compile (not adopted); earlier, Adam as five in-place tensor operations (no gain) "
        "and the probes' closed-form expectation ‖S P − I‖²_F (not adopted: the helper is trained on random "
        "probes). "
        "(2) As n grows the n×n' kernel work takes over, and in 2-D GPVI needs only a few more columns than "
        "amortised SVGD, so the ratio falls towards 1 (n = 1000 rows). "
        "(3) For the hypernetwork (n = 100, k = 32, m = 64, d = 502; counted, not measured) the reduction has "
        "4,109 columns against 1,005 (≈ 31 M extra multiply-adds), J_φ, the blocks A_j and the products "
        "P_j J_φ(z'_j)ᵀ add ≈ 26 M and the helper's update ≈ 13 M: ≈ 70 M on top of amortised SVGD's whole step of "
        "≈ 35 M (generator forward on both batches and backward, scores, distances, its reduction). No "
        "implementation of the exact block form can reach 1.5× there; only a cheaper, approximate coupling "
        "would. (4) That extra work does not grow with d, while the work GPVI shares with amortised SVGD "
        "(reduction columns, generator output layer, scores) does: at d ≈ 10⁴, the size the block form is for, "
        "both GPVI variants are within the goal (the d = 11,101 table). The `pairwise` helper evaluates its network "
        "on all n·n' pairs, which is why `helper: \"matrix\"` exists.", "",
        f"Load average at the end: {load_average()}."]
    text = "\n".join(body) + "\n"
    if args.no_write or args.quick:  # a smoke run never replaces the record
        print(text)
    else:
        replace_section(DOC, SECTION, text)
        print(f"wrote ## {SECTION} to {DOC}")


if __name__ == "__main__":
    main()
