"""Samplers: trained generators as standalone objects (docs/architecture.md, "Networks and samplers").

    sampler = method.sampler()                    # a generative method's current generator
    x = sampler.sample(1000, seed=7)              # [1000, d] float32, bit-identical for the same (n, seed)
    blob = sampler.to_zip_bytes()                 # config.json + weights.safetensors, deterministic bytes
    again = load(blob)                            # rebuilt from JSON + safetensors only (never pickle)
    graph = sampler.to_onnx_bytes()               # input "z" [n, noise_dim] → output "samples" [n, d]
    x, log_q = sampler.sample(1000, seed=7, with_log_q=True)   # + each draw's exact log q(x), float64

Certificates (samplers.certificate, issue 16): importance weights against a float64 target, PSIS / IMH
corrections and the quality report a service stores with each sampler:

    from inference_core.samplers.certificate import corrected_draws, sampler_quality
    report = sampler_quality(sampler, target)     # k̂, ESS, ELBO, log Ẑ ± s.e., KSD test, verdict
    exact_ish = corrected_draws(sampler, target, 1000, seed=7, method="imh").draws

Reproducing draws with onnxruntime:

    import onnxruntime as ort
    session = ort.InferenceSession(graph)
    z = sampler.sample_noise(n, seed).numpy()     # = torch.randn((n, noise_dim), generator=
                                                  #   torch.Generator("cpu").manual_seed(seed), dtype=float32)
    x = session.run(["samples"], {"z": z})[0]     # ≈ sampler.sample(n, seed) (float32 rounding)

Function-space samplers (FVI's stochastic process generators, `SPGSampler`, generator kind "spg") draw
functions: `sampler.sample(n, seed, x)` with inputs x [m, p] in original units returns [n, m] (samplers.spg).
"""

from inference_core.samplers.config import FORMAT, FORMAT_VERSION, NOISE_DRAW, SamplerConfig, validate_config
from inference_core.samplers.generator import ACTIVATIONS, GeneratorNetwork, generator_forward
from inference_core.samplers.onnx_export import INPUT_NAME as ONNX_INPUT_NAME
from inference_core.samplers.onnx_export import OUTPUT_NAME as ONNX_OUTPUT_NAME
from inference_core.samplers.sampler import Sampler, load
from inference_core.samplers.spg import SPGSampler

__all__ = [
    "ACTIVATIONS",
    "FORMAT",
    "FORMAT_VERSION",
    "NOISE_DRAW",
    "ONNX_INPUT_NAME",
    "ONNX_OUTPUT_NAME",
    "GeneratorNetwork",
    "SPGSampler",
    "Sampler",
    "SamplerConfig",
    "generator_forward",
    "load",
    "validate_config",
]
