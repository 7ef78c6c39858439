"""w-SGLD-B: the blob approximation of Wasserstein SGLD (Chen et al. 2018, "A unified particle-optimization
framework for scalable Bayesian sampling"), as in Table 1 of the f-POVI paper (Wang et al. 2019) and the
thu-ml/fpovi code (notes §1):

    φ(x_i) = ∇log p(x_i) + Σ_j ∇_{x_j} k(x_j, x_i) / Σ_l k(x_j, x_l) + Σ_j ∇_{x_j} k(x_j, x_i) / Σ_l k(x_i, x_l)
           = s_i + Σ_j g_ij (x_i − x_j) / S_j + Σ_j g_ij (x_i − x_j) / S_i,      S_i = Σ_l k(x_i, x_l),

g = −2f'(r²) (RBF: (2/h) k). The row sums S include k(x_i, x_i) and are constants of the step (the code's
stop-gradient); no 1/n. The "B" (blob) variant replaces the Brownian motion of SGLD by this deterministic
repulsion: there is no injected noise.
"""

from __future__ import annotations

import torch
from torch import Tensor

from inference_core.kernels import Kernel, kernel_grad_sum, kernel_matmul
from inference_core.kernels.common import centre
from inference_core.methods.base import KernelParticleMethod
from inference_core.methods.kernel_sums import gradient_weight_kernel
from inference_core.schemas.methods import WSGLDOptions
from inference_core.targets.base import Target


def wsgld_direction(
    x: Tensor, score: Tensor, kernel: Kernel, *, backend: str = "auto", precision: str = "ieee"
) -> Tensor:
    """The w-SGLD-B direction of the module docstring, [n, d]: three kernel passes, O(n²)."""
    kw = {"backend": backend, "precision": precision}
    xc, _ = centre(x)
    n = x.shape[0]
    row_sums = kernel_matmul(xc, None, xc.new_ones(n, 1), kernel, **kw)  # S_i, [n, 1]
    inv = 1.0 / row_sums
    repulsion = kernel_grad_sum(xc, kernel, **kw)  # Σ_j g_ij (x_i − x_j)
    scale, gkernel = gradient_weight_kernel(kernel)
    weighted = kernel_matmul(xc, None, torch.cat([inv, inv * xc], dim=1), gkernel, **kw)
    # Σ_j g_ij (x_i − x_j)/S_j = x_i Σ_j g_ij/S_j − Σ_j g_ij x_j/S_j
    first = scale * (xc * weighted[:, :1] - weighted[:, 1:])
    return score + first + repulsion * inv


class WSGLD(KernelParticleMethod):
    name = "wsgld"
    options: WSGLDOptions

    def __init__(self, target: Target, options: WSGLDOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        score = self.target.score(x, batch)
        h = self.bandwidth_rule(x)
        return wsgld_direction(x, score, self.kernel(h), **self.pairwise), {"bandwidth": float(h)}
