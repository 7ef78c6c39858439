"""Robustness suite (issue 14): real posteriors as `expression` targets, their references and scoring."""
