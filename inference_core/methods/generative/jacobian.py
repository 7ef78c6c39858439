"""The generator's Jacobian at the expectation points, as GPVI needs it (gpvi_math's notation):
J_f(z') = [[A + λI, 0], [B, λI]], A = W_top J_φ, B = W_rest J_φ, on DETACHED generator parameters, so
nothing computed here (helper losses included) ever reaches the generator's gradients.

Products are formed without the d×k Jacobian of g: Aᵀy = J_φᵀ(W_topᵀ y) and Bᵀc = J_φᵀ(W_restᵀ c) are
VJPs through the hidden stack φ only (torch.func.vjp at the n' points, vmapped over any leading batch of
cotangents: one forward per z', the pairs grouped by z'). J_φ itself (for the exact solve and the
kernel-matmul coupling) is propagated forward through the layers (the cost of k JVPs per z').

A "coupling" generator (samplers.generator: f(z) = [t(z[:k]); W φ(z[:k]) + b + λ z[k:]]) has
J_f(z') = [[J_t, 0], [B, λI]] with B = W J_φ as above (W its whole output layer, `w_rest`; `w_top` is None) and
J_t(z'_j) = ∂t/∂u at u = z'_j[:k], formed here per expectation point in closed form (CouplingTop.jacobian: each
coupling's Jacobian from its nets' tanh slopes, chained; detached weights, [n', k, k]). Its top system is
S_j = J_t(z'_j)ᵀ (in place of (A_j + λI)ᵀ), always invertible (det J_t > 0), and GPVI solves it exactly:
P_j = J_t(z'_j)^{-T}, y₁ = P_j (v₁ − Bᵀ v₂/λ), y₂ = v₂/λ (gpvi_math, "Block form").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.func import vjp, vmap

from inference_core.methods.generative import gpvi_math
from inference_core.networks import ACTIVATIONS, activation_slope
from inference_core.samplers.generator import GeneratorNetwork, mlp_features


class GeneratorJacobian:
    def __init__(self, network: GeneratorNetwork, z_expect: Tensor):
        self.k = network.input_dim
        self.noise_dim = network.noise_dim
        weight = network.output.weight.detach()
        self.top = network.top  # the "coupling" structure's top block t, else None
        if self.top is not None:
            self.w_top, self.w_rest = None, weight
        else:
            self.w_top, self.w_rest = weight[: self.k], weight[self.k:]
        self.hidden = network.hidden_params(detach=True)
        self.activation = network.activation
        self.z_prefix = (z_expect if self.k == self.noise_dim else z_expect[:, : self.k]).detach()
        self.linear = not self.hidden
        self._vjp_fn: Callable | None = None

    @property
    def _vjp(self) -> Callable:
        if self._vjp_fn is None:  # one forward of φ at the z', kept for every VJP of this step
            _, self._vjp_fn = vjp(self._features, self.z_prefix)
        return self._vjp_fn

    def _features(self, u: Tensor) -> Tensor:
        return mlp_features(self.hidden, u, self.activation)

    @property
    def feature_width(self) -> int:
        return self.k if self.linear else self.hidden[-1][0].shape[0]

    def features_vjp(self, c: Tensor) -> Tensor:
        """J_φ(z'_j)ᵀ c_j for c [..., n', m] → [..., n', k] (identity for a linear generator)."""
        if self.linear:
            return c
        if c.ndim == 2:
            return self._vjp(c)[0]
        lead = c.shape[:-2]
        flat = c.reshape(-1, *c.shape[-2:])
        out = vmap(lambda cot: self._vjp(cot)[0])(flat)
        return out.reshape(*lead, *out.shape[-2:])

    def top_vjp(self) -> Callable[[Tensor], Tensor] | None:
        """The `features_vjp` argument of gpvi_math.transpose_top_product (None when linear)."""
        return None if self.linear else self.features_vjp

    def coupling_vjp(self, c_rest: Tensor) -> Tensor:
        """Bᵀ c for c [..., n', D − k] → [..., n', k]."""
        return self.features_vjp(c_rest @ self.w_rest)

    def features_jacobian(self) -> Tensor | None:
        return self.features_and_jacobian()[1]

    def features_and_jacobian(self) -> tuple[Tensor, Tensor | None]:
        """(φ(z'), J_φ(z')): φ(z'_j) [n', m] (z'[:k] for a linear generator) and J_φ(z'_j) [n', m, k] (None for a
        linear generator: the identity), by forward propagation through the layers, J_1 = diag(act'(pre_1)) W_1
        and J_l = diag(act'(pre_l)) W_l J_{l−1}. Carried transposed, Jᵀ [n', k, m], so each layer is ONE folded
        GEMM [n'·k, m_in] @ W_lᵀ rather than n' small ones; returned as a transposed view. φ(z') comes out of
        the same pass (the generator's forward at z' need not repeat it)."""
        if self.linear:
            return self.z_prefix, None
        act = ACTIVATIONS[self.activation]
        h, Jt = self.z_prefix, None
        for weight, bias in self.hidden:
            pre = torch.nn.functional.linear(h, weight, bias)
            out = act(pre)
            # weight.T made contiguous: the product takes its operands' layout, and a column-major Jt
            # would turn the next layer's GEMM into n' small ones.
            product = weight.T.contiguous() if Jt is None else Jt @ weight.T
            if self.activation == "relu":  # the mask act'(pre) applied in one op (autograd's ReLU backward)
                Jt = torch.ops.aten.threshold_backward(product, pre.unsqueeze(-2), 0)
            else:
                Jt = activation_slope(self.activation, pre, out).unsqueeze(-2) * product  # slope [n', 1, m_l]
            h = out
        return h, Jt.transpose(-1, -2)

    def top_block(self, features_jacobian: Tensor | None) -> Tensor:
        """A_j = W_top J_φ(z'_j), [n', k, k] (a "coupling" generator: J_t(z'_j), the top block itself)."""
        if self.top is not None:
            return self.coupling_top_jacobians()
        n = self.z_prefix.shape[0]
        if features_jacobian is None:
            return self.w_top.expand(n, -1, -1)
        return (features_jacobian.transpose(-1, -2) @ self.w_top.T).transpose(-1, -2)  # one folded GEMM

    def coupling_factors(self, features_jacobian: Tensor | None, z: Tensor, z_expect: Tensor
                         ) -> tuple[Tensor, Tensor, Tensor]:
        """(Q, u, u') with Bᵀ(z_i,₂ − z'_j,₂) = Q_j (u_i − u'_j) (gpvi_math.matrix_direction): through the
        feature space (Q = J_φᵀ, u = W_restᵀ z₂) when it is narrower than D − k, else Q = Bᵀ, u = z₂."""
        k, n_expect = self.k, z_expect.shape[0]
        rest = self.noise_dim - k
        m = self.feature_width
        if m <= rest:
            if features_jacobian is None:
                Q = torch.eye(k, dtype=z.dtype, device=z.device).expand(n_expect, k, k)
            else:
                Q = features_jacobian.transpose(-1, -2)
            return Q, z[:, k:] @ self.w_rest, z_expect[:, k:] @ self.w_rest
        if features_jacobian is None:
            return self.w_rest.T.expand(n_expect, -1, -1), z[:, k:], z_expect[:, k:]
        return features_jacobian.transpose(-1, -2) @ self.w_rest.T, z[:, k:], z_expect[:, k:]  # Bᵀ, folded

    def coupling_top_jacobians(self) -> Tensor:
        """J_t(z'_j) = ∂t/∂u at u = z'_j[:k], [n', k, k] (output i, input j), in closed form on detached weights."""
        with torch.no_grad():
            return self.top.jacobian(self.z_prefix)

    def top_system(self, features_jacobian: Tensor | None, lam: float) -> Tensor:
        """S_j = J_f's top-left block transposed, [n', k, k]: (A_j + λI)ᵀ, or J_t(z'_j)ᵀ for a "coupling" generator."""
        if self.top is not None:
            return self.coupling_top_jacobians().transpose(-1, -2)
        return gpvi_math.top_system(self.top_block(features_jacobian), lam)

    def top_inverse_transpose(self, features_jacobian: Tensor | None, lam: float) -> Tensor:
        """P_j = S_j^{-1} = (top-left block of J_f(z'_j))^{-T}, [n', k, k], by torch.linalg.solve."""
        system = self.top_system(features_jacobian, lam)
        eye = torch.eye(system.shape[-1], dtype=system.dtype, device=system.device)
        return torch.linalg.solve(system, eye.expand_as(system))
