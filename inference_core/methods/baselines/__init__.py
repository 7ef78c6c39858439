"""Baselines the function-space papers compare against: `mfvi` (Bayes by Backprop, mfvi.py), `ensemble`
(deep ensemble, ensemble.py), and the reference samplers `hmc` / `nuts` driven through Pyro's kernels
(mcmc.py). Modules are imported lazily by the catalog (Pyro is only loaded for hmc/nuts)."""
