"""Optimiser helpers of the generative methods, now in `inference_core.methods.optim` (the one optimiser
module); re-exported here so existing imports keep working."""

from inference_core.methods.optim import make_optimizer, optimizer_step, zero_grads

__all__ = ["make_optimizer", "optimizer_step", "zero_grads"]
