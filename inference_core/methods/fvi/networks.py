"""The networks of a stochastic process generator (FVI, Ma & Hernández-Lobato 2021, §4.2-4.3):

* S basis networks φ_s: R^p → R (eq. 10), held as one flat weight row each and evaluated together by the
  batched `targets.models.network.MLP` (the same code the sampler runs, `samplers.spg.basis_values`);
* the decoder p_θ(a | h) = N(μ_θ(h), diag σ_θ(h)²), an MLP H → 2S (`samplers.generator.GeneratorNetwork`
  with λ = 0), σ_θ = softplus + 1e-4 (`samplers.spg.decode`); unless `learn_decoder_std`, the σ half of the
  output layer is frozen at raw = −20, so σ_θ ≡ 1e-4 and a = μ_θ(h) [inferred]: with a learnt σ_θ the
  distilled VAE collapses onto it (on boston h explained 1.2 of the prior's variance 8.1, the encoder's mean
  correlated 0.1 with h), and then q_η(h), the only thing FVI trains, cannot shape the posterior;
* the white-noise std σ_ν (log-parameterised);
* the product-of-experts encoder q̃_λ(h | f^X) (eq. 14): one expert MLP [f(x_i), x_i] → (μ_i, τ_i) per
  point, τ_i = softplus(raw) + 1e-6 [inferred], combined with the prior expert by `objective.product_of_experts`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from inference_core.methods.fvi import objective
from inference_core.samplers.generator import GeneratorNetwork
from inference_core.samplers.spg import basis_values, decode
from inference_core.schemas.fvi import FVIOptions
from inference_core.targets.models.network import MLP

_MIN_PRECISION = 1e-6
_LOG_2PI = math.log(2 * math.pi)
#: Raw decoder output behind a frozen σ_θ: softplus(−20) ≈ 2e-9, so σ_θ is the sampler's floor 1e-4.
FROZEN_STD_RAW = -20.0


def initial_basis_weights(network: MLP, n_basis: int, generator: torch.Generator, scale: float = 2.0,
                          box: Tensor | None = None) -> Tensor:
    """[S, D] float64 [inferred]: later layers N(0, 1/(fan_in + 1)), biases 0; the first layer either
    * box is None: weights N(0, scale²/p) and biases N(0, scale²/4), so the S bases start with varied slopes
      and offsets over standardised inputs, or
    * box [p, 2] given: weights N(0, scale²/p) divided per input by the box's width, and biases −w·c with the
      centres c uniform in the box, so every first-layer unit changes inside the box (a step-like prior needs
      its jumps there) and `scale` is the steepness per box width."""
    theta = network.initial_weights(n_basis, generator, torch.float64, generator.device)
    fan_out, fan_in = network.layer_shapes()[0]
    weight, bias = network.blocks["layer0.weight"], network.blocks["layer0.bias"]
    w = torch.randn(n_basis, fan_out, fan_in, generator=generator, dtype=torch.float64) * (scale / math.sqrt(fan_in))
    if box is None:
        b = torch.randn(n_basis, fan_out, generator=generator, dtype=torch.float64) * (scale / 2)
    else:
        low, width = box[:, 0].double(), (box[:, 1] - box[:, 0]).double()
        w = w / width
        centres = low + width * torch.rand(n_basis, fan_out, fan_in, generator=generator, dtype=torch.float64)
        b = -(w * centres).sum(-1)
    theta[:, weight.offset: weight.offset + weight.size] = w.reshape(n_basis, -1)
    theta[:, bias.offset: bias.offset + bias.size] = b
    return theta


class StochasticProcessGenerator(nn.Module):
    """Basis networks, decoder, σ_ν and the PoE encoder of an SPG over functions R^p → R."""

    def __init__(self, input_dim: int, options: FVIOptions, generator: torch.Generator, box: Tensor | None = None):
        super().__init__()
        self.input_dim = input_dim
        self.n_basis = options.n_basis
        self.latent_dim = options.latent_dim
        self.basis_hidden = list(options.basis_hidden)
        self.basis_activation = options.basis_activation
        self.decoder_hidden = list(options.decoder_hidden)
        self.activation = options.activation
        network = MLP(input_dim, self.basis_hidden, 1, self.basis_activation)
        self.basis_network = network
        centred = box if options.basis_centres == "box" else None
        self.basis_weights = nn.Parameter(
            initial_basis_weights(network, self.n_basis, generator, options.basis_init_scale, centred).float())
        # log-steepness ρ of each first-layer unit, pre-activation e^ρ (w·x + b) [inferred]: Adam moves ρ
        # additively, so a basis can turn into a step (or flatten) in a few hundred steps.
        self.basis_log_slope = nn.Parameter(torch.zeros(self.n_basis, self.basis_hidden[0] if self.basis_hidden else 1),
                                            requires_grad=options.learn_basis_slope)
        self.decoder = GeneratorNetwork(input_dim=self.latent_dim, hidden=self.decoder_hidden,
                                        output_dim=2 * self.n_basis, activation=self.activation, lam=0.0,
                                        generator=generator)
        self.encoder = GeneratorNetwork(input_dim=1 + input_dim, hidden=list(options.encoder_hidden),
                                        output_dim=2 * self.latent_dim, activation=self.activation, lam=0.0,
                                        generator=generator)
        self.log_white_noise = nn.Parameter(torch.tensor(math.log(options.white_noise_init)),
                                            requires_grad=options.learn_white_noise)
        if not options.learn_decoder_std:
            self._freeze_decoder_std()
        #: parameters distillation trains; the held ones (σ_ν, the slopes unless asked) keep requires_grad False
        self.trainable = [p for p in self.parameters() if p.requires_grad]
        #: the shared part of p̃_SPG and q_SPG (bases, their slopes when learnt, decoder): what `adapt_generator`
        #: lets the posterior phase train; the encoder and σ_ν serve the prior fit only
        encoder = {id(p) for p in self.encoder.parameters()} | {id(self.log_white_noise)}
        self.generator_parameters = [p for p in self.trainable if id(p) not in encoder]

    def set_trainable(self, flag: bool) -> None:
        """Switch gradients of the distilled parameters only: `requires_grad_(True)` on the module would also
        switch on the held ones (it silently trained the basis slopes with learn_basis_slope False)."""
        for p in self.trainable:
            p.requires_grad_(flag)

    def set_generator_trainable(self, flag: bool) -> None:
        for p in self.generator_parameters:
            p.requires_grad_(flag)

    def _freeze_decoder_std(self) -> None:
        """σ_θ(h) ≡ softplus(FROZEN_STD_RAW) + 1e-4: the σ rows of the output layer are zero with bias
        FROZEN_STD_RAW, and their gradient is masked so no optimiser moves them."""
        out, S = self.decoder.output, self.n_basis
        with torch.no_grad():
            out.weight[S:] = 0.0
            out.bias[S:] = FROZEN_STD_RAW
        keep_w = torch.ones_like(out.weight, dtype=torch.bool)
        keep_w[S:] = False
        keep_b = torch.arange(out.bias.shape[0]) < S
        out.weight.register_hook(lambda grad: grad * keep_w.to(grad.device))
        out.bias.register_hook(lambda grad: grad * keep_b.to(grad.device))

    def effective_basis_weights(self) -> Tensor:
        """[S, D] flat basis weights with the steepness e^ρ folded into the first layer (what the sampler stores)."""
        if not self.basis_hidden:
            return self.basis_weights
        weight, bias = self.basis_network.blocks["layer0.weight"], self.basis_network.blocks["layer0.bias"]
        slope = self.basis_log_slope.exp()  # [S, h0]
        fan_in = self.input_dim
        return torch.cat([
            (self.basis_weights[:, weight.offset: weight.offset + weight.size].reshape(self.n_basis, -1, fan_in)
             * slope.unsqueeze(-1)).reshape(self.n_basis, -1),
            self.basis_weights[:, bias.offset: bias.offset + bias.size] * slope,
            self.basis_weights[:, bias.offset + bias.size:]], dim=1)

    def basis(self, u: Tensor) -> Tensor:
        """Φ [m, S] at inputs u [m, p] (model units)."""
        return basis_values(self.effective_basis_weights(), u, self.basis_hidden, self.basis_activation)

    def decode(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """(μ_a, σ_a) [n, S] of p_θ(a | h)."""
        return decode(dict(self.decoder.named_parameters()), h, len(self.decoder_hidden), self.activation)

    def white_noise_std(self) -> Tensor:
        return self.log_white_noise.exp()

    def experts(self, f: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """Per-point experts (μ_i, τ_i) [n, m, H] for function values f [n, m] at inputs u [m, p]."""
        n, m = f.shape
        inputs = torch.cat([f.unsqueeze(-1), u.unsqueeze(0).expand(n, m, u.shape[1])], dim=-1)
        out = self.encoder(inputs.reshape(n * m, -1)).reshape(n, m, 2 * self.latent_dim)
        mean, raw = out.chunk(2, dim=-1)
        return mean, F.softplus(raw) + _MIN_PRECISION

    def distillation_elbo(self, f: Tensor, u: Tensor, noise: Tensor) -> Tensor:
        """Per-function ELBO of eq. 13 [M] for prior draws f [M, m] at u [m, p], one reparameterised h per
        function (noise [M, H] standard normal): log p̃(f | h) (a integrated out exactly) − KL(q̃_λ ‖ p₀)."""
        mean, precision = objective.product_of_experts(*self.experts(f, u))
        h = mean + noise / precision.sqrt()
        a_mean, a_std = self.decode(h)
        log_lik = objective.spg_log_likelihood(f, self.basis(u), a_mean, a_std.square(),
                                               self.white_noise_std().square())
        return log_lik - objective.gaussian_kl_to_standard(mean, precision)

    def sleep_log_density(self, u: Tensor, weight: Tensor, h: Tensor, eps_a: Tensor, eps_nu: Tensor) -> Tensor:
        """log q̃_λ(h | f^u) [M] for SPG draws f = (μ_θ(h) + σ_θ(h) eps_a) Φ(u)ᵀ + σ_ν eps_nu from known h [M, H]
        (h ~ p₀), with the PoE weighted per point as J_K weighs it (`weight` [m]: N/K on training rows, 1 on
        the others). Maximising it in λ is the sleep phase of wake-sleep [inferred]: it fits the encoder to
        the surrogate's own posterior p̃(h | f), which eq. 17 substitutes it for, in the regime J uses it."""
        with torch.no_grad():
            a_mean, a_std = self.decode(h)
            f = (a_mean + a_std * eps_a) @ self.basis(u).T + self.white_noise_std() * eps_nu
        mean, precision = objective.product_of_experts(*self.experts(f, u), weight)
        return 0.5 * (precision.log() - precision * (h - mean).square() - _LOG_2PI).sum(-1)

    def sampler_tensors(self) -> dict[str, Tensor]:
        """The basis and decoder tensors under the sampler's names (q_η is added by the method)."""
        tensors = {"basis.weights": self.effective_basis_weights().detach()}
        tensors.update({f"decoder.{name}": p.detach() for name, p in self.decoder.named_parameters()})
        return tensors
