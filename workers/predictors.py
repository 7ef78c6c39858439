"""A particle job's predictor in the store: `jobs/<id>/predictor.zip` (config.json with the predictive model and
weight layout + weights.safetensors, `inference_core.prediction.ensemble`), what `/v1/jobs/{id}/predict` loads."""

from __future__ import annotations

import logging
from typing import Any

from service.models import Artifact
from service.samplers import PREDICTOR_ROLE, ZIP_MEDIA_TYPE, artifact_row
from service.store import ArtifactStore

logger = logging.getLogger("parvis.worker")


def predictor_key(job_id: str) -> str:
    return f"jobs/{job_id}/predictor.zip"


def store_predictor(store: ArtifactStore, method: Any, *, tenant_id: str, job_id: str) -> Artifact | None:
    """Write the predictor of a particle method on a `bnn`/`function_posterior` target with a network and
    return its (unsaved) artifact row; None when the target has no predictive model. A failure to write it
    is logged and leaves the job without one (prediction is a convenience, the particles are the result)."""
    from inference_core.prediction import ensemble_archive

    try:
        blob = ensemble_archive(method)
        if blob is None:
            return None
        stored = store.put(predictor_key(job_id), blob)
    except Exception:  # noqa: BLE001
        logger.warning("job %s: the predictor could not be stored", job_id, exc_info=True)
        return None
    return artifact_row(stored, tenant_id, PREDICTOR_ROLE, ZIP_MEDIA_TYPE, job_id=job_id)
