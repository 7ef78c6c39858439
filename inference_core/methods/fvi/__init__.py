"""FVI with stochastic process generators (Ma & Hernández-Lobato, NeurIPS 2021): networks, objective, method."""
