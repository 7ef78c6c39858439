"""Trained samplers in the store: the zip (config.json + weights.safetensors) and the ONNX graph."""

from __future__ import annotations

import logging
from typing import Any

from service.job_state import new_id
from service.models import Artifact, Sampler
from service.store import ArtifactStore, StoredBlob

logger = logging.getLogger("parvis.worker")

ZIP_MEDIA_TYPE = "application/zip"
ONNX_MEDIA_TYPE = "application/onnx"
#: The artifact role of a particle job's predictor (`jobs/<id>/predictor.zip`, workers/predictors.py).
PREDICTOR_ROLE = "predictor"


def artifact_row(blob: StoredBlob, tenant_id: str, role: str, media_type: str, *, job_id: str | None = None,
                 sampler_id: str | None = None) -> Artifact:
    return Artifact(id=new_id("art"), tenant_id=tenant_id, job_id=job_id, sampler_id=sampler_id, role=role,
                    path=blob.key, sha256=blob.sha256, size_bytes=blob.size_bytes, media_type=media_type)


def store_sampler(store: ArtifactStore, trained: Any, *, tenant_id: str, job_id: str,
                  method: str) -> tuple[Sampler, list[Artifact]]:
    """Write a trained `inference_core.samplers.Sampler` and return its (unsaved) record and artifact rows.

    The ONNX export is a convenience: if it fails the sampler is stored without it.
    """
    sampler_id = new_id("smp")
    weights = store.put(f"samplers/{sampler_id}/sampler.zip", trained.to_zip_bytes())
    artifacts = [artifact_row(weights, tenant_id, "weights", ZIP_MEDIA_TYPE, sampler_id=sampler_id)]
    try:
        graph = store.put(f"samplers/{sampler_id}/sampler.onnx", trained.to_onnx_bytes())
        artifacts.append(artifact_row(graph, tenant_id, "onnx", ONNX_MEDIA_TYPE, sampler_id=sampler_id))
    except Exception:  # noqa: BLE001
        logger.warning("job %s: ONNX export failed; the sampler is stored without it", job_id, exc_info=True)
    record = Sampler(id=sampler_id, tenant_id=tenant_id, job_id=job_id, method=method, config=trained.config)
    return record, artifacts
