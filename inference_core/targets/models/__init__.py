"""Bayesian model targets built from data (issue #4): linear and logistic regression, BNNs, and function
posteriors. Each module has a `build(spec, context)` registered in `inference_core.catalog`; the minibatch
rule (likelihood × N/B) lives in `data.DataTarget` only."""
