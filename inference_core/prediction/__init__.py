"""Posterior predictive distributions of Bayesian neural networks and function-space samplers (`/predict`)."""

from inference_core.prediction.ensemble import EnsemblePredictor, ensemble_archive, load_ensemble
from inference_core.prediction.mixture import mixture_moments, mixture_quantiles
from inference_core.prediction.model import predictive_model
from inference_core.prediction.predictive import (
    DEFAULT_QUANTILES,
    FunctionPredictor,
    PredictionUnsupported,
    Predictor,
    WeightPredictor,
    predictor_for_method,
    predictor_from_sampler,
)

__all__ = [
    "DEFAULT_QUANTILES",
    "EnsemblePredictor",
    "FunctionPredictor",
    "PredictionUnsupported",
    "Predictor",
    "WeightPredictor",
    "ensemble_archive",
    "load_ensemble",
    "mixture_moments",
    "mixture_quantiles",
    "predictive_model",
    "predictor_for_method",
    "predictor_from_sampler",
]
