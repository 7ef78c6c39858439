"""GPVI's functional gradient as pure functions (Ratzlaff et al. 2021, eqs. 5–11; docs/implementation-notes.md, "GPVI (ALF)").

Notation. Noise z ∈ R^D, generator f(z) = g(z[:k]) + λz with g(u) = W φ(u) + b (samplers.generator), so

    J_f(z) = [[A + λI_k, 0], [B, λI_{D−k}]],   A = W_top J_φ(z[:k]) (k×k),  B = W_rest J_φ(z[:k])  (eq. 7)

(k = D: J_f = A + λI, λ = 0 allowed). The ascent direction pulled back through the generator is
φ(z_i) = −∇_f 𝒥(f)(z_i) (eq. 5 / eq. 9), estimated with an independent expectation batch z'_1..z'_n':

    φ(z_i) = (1/n') Σ_j [ k(z'_j, z_i) ∇log p(f(z'_j))  +  J_f(z'_j)^{-T} ∇_{z'} k(z'_j, z_i) ].

The inverse is TRANSPOSED: the derivative of log|det J| in the direction ψ is tr(J⁻¹ ∂ψ/∂z), whose Riesz
representer is J^{-T} ∇k (Appendix A.1 with the indices written out). The paper prints (∂f/∂z')⁻¹∇k but
trains its helper through the vector–Jacobian product hᵀ(∂f/∂z') (eq. 11), i.e. solves J_fᵀ y = v; ALF does
the same. (For a linear generator f = Wz the exact θ-gradient of E[−log|det W|] is −W^{-T}, which only the
transposed form reproduces.)

Block form (GPVI+, derived from the block lower-triangular J_f): J_fᵀ y = v with v = [v₁; v₂] reads
    (A + λI)ᵀ y₁ + Bᵀ y₂ = v₁,   λ y₂ = v₂
so  y₂ = v₂/λ  and  y₁ = (A + λI)^{-T} (v₁ − Bᵀ v₂/λ).  Only the k×k block is ever solved or learned; Bᵀc
is a VJP of φ: Bᵀc = J_φᵀ (W_restᵀ c).

RBF kernel on the noise: k(a, b) = exp(−||a − b||²/h), ∇_a k(a, b) = (2/h) k(a, b) (b − a).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor

from inference_core.kernels.bandwidth import bandwidth_value, distance_median
from inference_core.methods.kernel_sums import cross_kernel_matmul

# ||a_i − b_j||² [na, nb], centred Gram form on the union mean, clamped at 0 (shared with the speed-ups).
from inference_core.methods.kernel_sums import cross_sq_dists as squared_distances


def median_bandwidth(sq: Tensor, divisor: str, n: int, distinct_pairs: bool = False) -> float:
    """h = median(squared distances) / divisor(n) (paper Appendix B.2: med²/log n, med the median distance)
    by the one median rule (`kernels.bandwidth`: `distance_median`, then `bandwidth_value`, h = 1 for a zero
    median). `sq` is a cross-distance matrix (all entries count) or, with `distinct_pairs`, the square
    distance matrix of one batch (its i < j entries)."""
    return bandwidth_value(distance_median(sq, distinct_pairs=distinct_pairs), divisor, n)


def cross_kernel_matmuls(z: Tensor, z_expect: Tensor, pieces: list[Tensor], h: float, sq: Tensor | None = None,
                         backend: str = "auto", scale: float = 1.0) -> list[Tensor]:
    """[scale · Σ_j k(z_i, z'_j) V_j for V in pieces] by ONE kernel matmul over the pieces side by side: the
    n×n' kernel is read once (a product per piece would read it once per piece, which dominates when the
    pieces are narrow); the concatenation copies only n' rows, and `scale` is applied to that copy."""
    joined = cross_kernel_matmul(z, z_expect, torch.cat(pieces, dim=1).mul_(scale), h, sq, backend=backend)
    return list(torch.split(joined, [piece.shape[1] for piece in pieces], dim=1))


def driving_term(K: Tensor, score_expect: Tensor) -> Tensor:
    """(1/n') Σ_j k(z'_j, z_i) ∇log p(f(z'_j)), [n, d]: the first term of eq. 9 (as an ascent direction).
    K is [n', n] with K[j, i] = k(z'_j, z_i)."""
    return K.T @ score_expect / K.shape[0]


def kernel_gradients(K: Tensor, z_expect: Tensor, z: Tensor, h: float) -> Tensor:
    """∇_{z'} k(z'_j, z_i) = (2/h) k(z'_j, z_i) (z_i − z'_j), as [n, n', D] (i first)."""
    return (2.0 / h) * K.T.unsqueeze(-1) * (z.unsqueeze(1) - z_expect.unsqueeze(0))


def block_rhs(v: Tensor, k: int, lam: float, coupling_vjp: Callable[[Tensor], Tensor] | None) -> Tensor:
    """w = v₁ − Bᵀv₂/λ, the right-hand side of the k×k system (A + λI)ᵀ y₁ = w (block form above).

    `v` [..., D]; `coupling_vjp(v₂) = Bᵀ v₂` per expectation point (None when k = D: w = v)."""
    if coupling_vjp is None or v.shape[-1] == k:
        return v[..., :k]
    return v[..., :k] - coupling_vjp(v[..., k:]) / lam


def pairwise_repulsion(y_top: Tensor, v: Tensor, k: int, lam: float) -> Tensor:
    """(1/n') Σ_j J_f(z'_j)^{-T} ∇_{z'} k(z'_j, z_i), [n, D], from the top-block solutions y₁ [n, n', k]
    (helper outputs or exact) and y₂ = v₂/λ (eq. 9's second term, block form)."""
    top = y_top.mean(1)
    if v.shape[-1] == k:
        return top
    return torch.cat([top, v[..., k:].mean(1) / lam], dim=-1)


def transpose_top_product(y: Tensor, w_top: Tensor, lam: float, features_vjp: Callable[[Tensor], Tensor] | None
                          ) -> Tensor:
    """(A_j + λI)ᵀ y = J_φ(z'_j)ᵀ W_topᵀ y + λy for y [..., n', k] (eq. 11: a VJP of g plus λy).

    `features_vjp(c)` applies J_φ(z'_j)ᵀ to c [..., n', m] (None for a linear generator, J_φ = I)."""
    c = y @ w_top  # W_topᵀ y in row form: [..., n', m]
    back = c if features_vjp is None else features_vjp(c)
    return back + lam * y


def matrix_helper_loss(system: Tensor, P: Tensor, probes: Tensor) -> tuple[Tensor, Tensor]:
    """The matrix helper's residual loss and its gradient: (L, dL/dP) for
    L = mean over (q, j, ·) of (S_j P_j r_qj − r_qj)², S_j = (A_j + λI)ᵀ (`top_system`), probes r [q, n', k]
    (eq. 10 with y = P r).

    The same loss on the same probes, through their Gram matrices C_j = Σ_q r_qj r_qjᵀ: with E_j = S_j P_j − I,
        L = (1/N) Σ_j ⟨E_j C_j, E_j⟩_F,   dL/dP_j = (2/N) S_jᵀ E_j C_j,   N = q·n'·k,
    so every product after C is k×k (a batched product of many tiny matrices costs per matrix, and the
    probe count then enters only C)."""
    count = probes.numel()
    Pi = probes.permute(1, 2, 0)  # [n', k, q]
    gram = torch.bmm(Pi, Pi.transpose(1, 2))
    E = torch.baddbmm(_identity(P.shape[-1], P.dtype, P.device), system, P, beta=-1)
    EC = torch.bmm(E, gram)
    loss = torch.dot(E.view(-1), EC.view(-1)).div_(count)
    # (2/N) Sᵀ E C as one op: with beta = 0 the input (EC, any tensor of the shape) is ignored
    return loss, torch.baddbmm(EC, system.transpose(1, 2), EC, beta=0, alpha=2.0 / count)


@functools.lru_cache(maxsize=16)
def _identity(k: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """I_k, made once per (k, dtype, device) and only ever read (a step is op-bound at small sizes)."""
    return torch.eye(k, dtype=dtype, device=device)


def helper_loss(residual: Tensor) -> Tensor:
    """Eq. 10, ||J_f h − ∇k||² written with the VJP (eq. 11): the mean square of (A + λI)ᵀ y − w."""
    return residual.square().mean()


def top_system(A: Tensor, lam: float) -> Tensor:
    """S_j = (A_j + λI)ᵀ, [n', k, k]: the k×k system of the block form, J_fᵀ's top-left block (a view of A
    when λ = 0)."""
    if lam == 0:
        return A.transpose(-1, -2)
    return A.transpose(-1, -2) + lam * _identity(A.shape[-1], A.dtype, A.device)


def exact_top_inverse_transpose(A: Tensor, lam: float) -> Tensor:
    """P_j = (A_j + λI)^{-T} for A [n', k, k], by torch.linalg.solve (never an explicit `inverse`)."""
    system = top_system(A, lam)
    eye = _identity(A.shape[-1], A.dtype, A.device)
    return torch.linalg.solve(system, eye.expand_as(system))


def matrix_direction(z: Tensor, z_expect: Tensor, score_expect: Tensor, h: float, P: Tensor, lam: float,
                     coupling: tuple[Tensor, Tensor, Tensor] | None, *, entropy_weight: float = 1.0,
                     sq: Tensor | None = None, backend: str = "auto") -> tuple[Tensor, Tensor]:
    """(driving term, repulsive term), each [n, ·], of eq. 9 from per-z' matrices P_j = (A_j + λI)^{-T}
    (exact, or the matrix helper) — everything through ONE kernel matmul, no network on the n·n' pairs.

    With ∇_{z'}k(z'_j, z_i) = (2/h) K_ij (z_i − z'_j), K_ij = k(z_i, z'_j), and the block form,

      Σ_j y₁(j, i) = (2/h)[ (Σ_j K_ij P_j) z_i,₁ − Σ_j K_ij P_j z'_j,₁
                            − (1/λ)(Σ_j K_ij R_j) u_i + (1/λ) Σ_j K_ij R_j u'_j ],       R_j = P_j Q_j,
      Σ_j y₂(j, i) = (2/(hλ)) [ (Σ_j K_ij) z_i,₂ − Σ_j K_ij z'_j,₂ ],

    where Bᵀ(z_i,₂ − z'_j,₂) = Q_j (u_i − u'_j) is the coupling factorised by the caller:
    `coupling` = (Q [n', k, m], u [n, m], u' [n', m]) — Q_j = J_φ(z'_j)ᵀ with u = W_restᵀ z₂ when the hidden
    width m < D − k, or Q_j = B_jᵀ with u = z₂ — and None when k = D. Returns terms averaged over j (1/n').
    """
    n_expect, k = z_expect.shape[0], P.shape[-1]
    D = z.shape[1]
    if (coupling is None) != (k == D):
        raise ValueError("the coupling (Q, u, u') is needed exactly when the noise is wider than k")
    pieces = matrix_pieces(z_expect, score_expect, P, None if coupling is None else (coupling[0], coupling[2]))
    sums = cross_kernel_matmuls(z, z_expect, pieces, h, sq, backend, scale=1.0 / n_expect)
    return matrix_combine(z, sums, k, h, lam, None if coupling is None else coupling[1], entropy_weight)


def matrix_pieces(z_expect: Tensor, score_expect: Tensor, P: Tensor, coupling: tuple[Tensor, Tensor] | None
                  ) -> list[Tensor]:
    """The per-z' rows V_j that `matrix_direction` sums against the kernel, [n', ·] each: s_j, P_j, P_j z'_j,₁ and,
    with the coupling (Q [n', k, m], u' [n', m]), R_j = P_j Q_j, R_j u'_j, z'_j,₂ and 1. Row j depends on z'_j only,
    so ranks can form their own rows' pieces and gather them (GPVI's ranked step)."""
    n_expect, k = z_expect.shape[0], P.shape[-1]
    pieces = [score_expect, P.reshape(n_expect, k * k), _batched_mv(P, z_expect[:, :k])]
    if coupling is not None:
        Q, u_expect = coupling
        R = P @ Q  # [n', k, m]
        m = R.shape[-1]
        pieces += [R.reshape(n_expect, k * m), _batched_mv(R, u_expect), z_expect[:, k:],
                   torch.ones(n_expect, 1, dtype=z_expect.dtype, device=z_expect.device)]
    return pieces


def matrix_combine(z: Tensor, sums: list[Tensor], k: int, h: float, lam: float, u: Tensor | None,
                   entropy_weight: float = 1.0) -> tuple[Tensor, Tensor]:
    """(driving term, repulsive term) of `matrix_direction` at the rows z [n, D] from the kernel sums
    Σ_j K_ij V_j / n' of `matrix_pieces` (in its order) and, with the coupling, u [n, m] of those rows."""
    drive, sum_P, sum_P_z = sums[0], sums[1].reshape(-1, k, k), sums[2]
    top = _batched_mv(sum_P, z[:, :k]) - sum_P_z
    if u is None:
        repulsion = top
    else:
        m = u.shape[-1]
        sum_R, sum_R_u, sum_z2, k_sum = sums[3].reshape(-1, k, m), sums[4], sums[5], sums[6]
        top = top - (_batched_mv(sum_R, u) - sum_R_u) / lam
        repulsion = torch.cat([top, (k_sum * z[:, k:] - sum_z2) / lam], dim=-1)
    return drive, entropy_weight * (2.0 / h) * repulsion


def _batched_mv(M: Tensor, v: Tensor) -> Tensor:
    """M_j v_j for M [n, a, b], v [n, b] → [n, a] (one bmm: `@` on batches adds expand/view ops)."""
    return torch.bmm(M, v.unsqueeze(-1)).squeeze(-1)


def full_solve_repulsion(jacobians: Tensor, z: Tensor, z_expect: Tensor, h: float) -> Tensor:
    """Reference: (1/n') Σ_j J_f(z'_j)^{-T} ∇_{z'}k(z'_j, z_i) with the full D×D Jacobians [n', D, D]
    solved per pair (O(n·n'·D³); tests and debugging only)."""
    K = torch.exp(-squared_distances(z_expect, z) / h)
    v = kernel_gradients(K, z_expect, z, h)  # [n, n', D]
    system = jacobians.transpose(-1, -2).unsqueeze(0).expand(z.shape[0], -1, -1, -1)
    y = torch.linalg.solve(system, v.unsqueeze(-1)).squeeze(-1)
    return y.mean(1)
