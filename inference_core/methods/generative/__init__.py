"""Generative methods (family "generative"): a neural sampler trained by pulling a particle-space direction
back through it. GPVI (Ratzlaff et al. 2021) and its exact-Jacobian variant; amortised SVGD, GFSF and KSD; and
`amortized_fsvgd`, a BNN hypernetwork trained with f-SVGD's function-space direction.
`method.sampler()` snapshots the generator as an `inference_core.samplers.Sampler`."""

from inference_core.methods.generative.amortized import AmortizedGFSF, AmortizedKSD, AmortizedSVGD
from inference_core.methods.generative.amortized_fsvgd import AmortizedFSVGD
from inference_core.methods.generative.base import GenerativeMethod
from inference_core.methods.generative.gpvi import GPVI, GPVIExact

__all__ = ["GPVI", "AmortizedFSVGD", "AmortizedGFSF", "AmortizedKSD", "AmortizedSVGD", "GPVIExact", "GenerativeMethod"]
