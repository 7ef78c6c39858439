"""Posterior predictive distributions of Bayesian neural networks and function-space samplers (`/predict`)."""

from inference_core.prediction.model import predictive_model

__all__ = ["predictive_model"]
