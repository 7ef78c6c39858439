"""Data layer used by both the API and the workers: settings, models, engine, artifact store, job state."""
