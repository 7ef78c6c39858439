"""Trained samplers: list, inspect (with the quality report stored at creation), download (zip of config.json +
weights.safetensors, or ONNX), draw fresh samples (bit-identical for the same sampler, n and seed, and inputs x
for function-space samplers) with their exact log q, importance weights or a correction (app.api.compute),
delete."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from app.api.compute import (
    BYTES_PER_VALUE,
    MAX_PROPOSALS_PER_DRAW,
    EvaluationBudget,
    build_float64_target,
    certified_draw,
    draw,
    load_sampler,
    spg_density_unavailable,
    target_key,
    values_per_draw,
)
from app.api.deps import CurrentTenant, SessionDep, SettingsDep, StoreDep
from app.api.negotiation import array_response, choose_array_format
from app.api.pagination import PageSize, PageToken, clamp_page_size, cursor_of, next_token
from app.api.problems import Problem
from app.api.schemas import SamplerList, SamplerOut
from app.api.views import sampler_out
from service.repositories import Samplers
from service.samplers import ONNX_MEDIA_TYPE, ZIP_MEDIA_TYPE

router = APIRouter(prefix="/v1/samplers", tags=["samplers"])


class SampleRequest(BaseModel):
    model_config = ConfigDict(strict=True)  # "10" or true is not a number (issue 15)

    n: int = Field(ge=1, description="number of draws")
    seed: int = Field(default=0, ge=0, le=2**63 - 1)
    x: list[list[float]] | None = Field(
        default=None, description="inputs [m, p] in the data's original units: required by function-space "
        "(generator kind 'spg') samplers, which return f at x, [n, m]; refused by the others")
    returns: list[Literal["log_q", "log_weights"]] = Field(
        default_factory=list, alias="return", max_length=2,
        description="per-draw extras (JSON answers only): 'log_q', the generator's exact log-density at each "
        "draw (float64); 'log_weights', log p̃(x) − log q(x) against the job's target")
    correct: Literal["psis", "imh"] | None = Field(
        default=None, description="'psis': n draws resampled by their Pareto-smoothed importance weights from "
        "`proposals` generator draws; 'imh': independence Metropolis-Hastings with the generator as proposal")
    proposals: int | None = Field(default=None, ge=1, description="generator draws behind a correction "
                                  f"(default 2n; n to {MAX_PROPOSALS_PER_DRAW}n)")


def check_inputs(body: SampleRequest, config: dict[str, Any], settings: Any) -> list[list[float]] | None:
    """x against the sampler's kind: 422 x_required / x_not_accepted / x_shape_invalid / x_nonfinite,
    413 limit_exceeded when n·len(x) is over `max_sample_values`."""
    generator = config.get("generator", {})
    if generator.get("kind") != "spg":
        if body.x is not None:
            raise Problem(422, "x_not_accepted", "this sampler draws parameter vectors and takes no inputs x")
        return None
    width = int(generator.get("input_dim", 0))
    if body.x is None:
        raise Problem(422, "x_required", f"this sampler draws functions: give inputs x of shape [m, {width}]")
    if not body.x or any(len(row) != width for row in body.x):
        raise Problem(422, "x_shape_invalid", f"x must be a non-empty list of rows of {width} numbers")
    if not all(math.isfinite(value) for row in body.x for value in row):
        raise Problem(422, "x_nonfinite", "x holds NaN or infinite values")
    if body.n * len(body.x) > settings.max_sample_values:
        raise Problem(413, "limit_exceeded", f"n·len(x) = {body.n * len(body.x)} is over the cap of "
                      f"{settings.max_sample_values} values per request")
    return body.x


@router.get("", response_model=SamplerList)
def list_samplers(session: SessionDep, tenant: CurrentTenant, settings: SettingsDep,
                  page_size: PageSize = None, page_token: PageToken = None) -> SamplerList:
    size = clamp_page_size(page_size, settings.default_page_size, settings.max_page_size)
    filters, secret = {"kind": "samplers"}, settings.resolved_secret_key()
    samplers = Samplers(session, tenant)
    page = samplers.page(size, cursor_of(secret, page_token, filters))
    return SamplerList(samplers=[sampler_out(s, samplers.artifacts(s)) for s in page.items],
                       next_page_token=next_token(secret, page, filters))


@router.get("/{sampler_id}", response_model=SamplerOut)
def get_sampler(sampler_id: str, session: SessionDep, tenant: CurrentTenant) -> SamplerOut:
    samplers = Samplers(session, tenant)
    sampler = samplers.owned(sampler_id)
    return sampler_out(sampler, samplers.artifacts(sampler))


@router.get("/{sampler_id}/download", responses={200: {"content": {ZIP_MEDIA_TYPE: {}, ONNX_MEDIA_TYPE: {}}}})
def download_sampler(sampler_id: str, session: SessionDep, tenant: CurrentTenant, store: StoreDep,
                     format: Annotated[str, Query(description="safetensors | onnx (else 422 format_invalid)",
                                                  json_schema_extra={"enum": ["safetensors", "onnx"]})]
                     = "safetensors") -> Response:
    samplers = Samplers(session, tenant)
    sampler = samplers.owned(sampler_id)
    roles = {"safetensors": ("weights", ZIP_MEDIA_TYPE, "zip"), "onnx": ("onnx", ONNX_MEDIA_TYPE, "onnx")}
    if format not in roles:
        raise Problem(422, "format_invalid", "format must be 'safetensors' (a zip of config.json and "
                      "weights.safetensors) or 'onnx'")
    role, media_type, suffix = roles[format]
    artifact = samplers.artifacts(sampler).get(role)
    if artifact is None and format == "onnx" and sampler.config.get("generator", {}).get("kind") == "spg":
        raise Problem(422, "onnx_unavailable", "this function-space (spg) sampler has no ONNX graph; download "
                      "format=safetensors and use inference_core.samplers.load")
    if artifact is None:
        raise Problem(404, "not_found", f"this sampler has no {format} artifact")
    return Response(store.get(artifact.path), media_type=media_type, headers={
        "Content-Disposition": f'attachment; filename="{sampler.id}.{suffix}"',
        "X-Content-SHA256": artifact.sha256})


@router.post("/{sampler_id}/sample", responses={200: {"content": {"application/json": {}, "application/x-npy": {}}}})
async def sample(sampler_id: str, body: SampleRequest, request: Request, tenant: CurrentTenant,
                 settings: SettingsDep, store: StoreDep) -> Response:
    """Checks and reads run in the request threadpool with a short-lived session (closed before any draw);
    loading and drawing run in the bounded compute pool (app.api.compute); `.npy` answers are streamed."""
    answer_format = choose_array_format(request)  # 406 before any work
    if body.n > settings.max_sample_n:
        raise Problem(413, "limit_exceeded", f"n {body.n} is over the cap of {settings.max_sample_n} draws per request")
    check_certificate_request(body, answer_format)
    x, weights_path, weights_sha, target_spec = await run_in_threadpool(
        prepare_draws, request, tenant, sampler_id, body, settings, answer_format)

    def compute() -> Any:
        generator = request.app.state.sampler_cache.get(weights_sha, lambda: load_sampler(store.get(weights_path)))
        if body.returns or body.correct:
            target = None
            if target_spec is not None:
                target = request.app.state.target_cache.get(target_key(target_spec),
                                                            lambda: build_float64_target(target_spec))
            return certified_draw(generator, target, body.n, body.seed, list(body.returns), body.correct,
                                  body.proposals, EvaluationBudget.of(settings))
        try:
            return draw(generator, body.n, body.seed, x), {}
        except ValueError as exc:
            raise Problem(422, "input_invalid", str(exc)) from None

    pool = request.app.state.compute
    draws, extra = await pool.run(compute)
    if answer_format == "npy":
        response = array_response(request, draws, "samples", stream=True)
        for name, value in extra.get("correction", {}).items():  # the diagnostics of a correction, as headers
            response.headers[f"X-Correction-{name.replace('_', '-').title()}"] = str(value)
        return response
    return await pool.run(array_response, request, draws, "samples", {"seed": body.seed, **extra})


def check_certificate_request(body: SampleRequest, answer_format: str) -> None:
    """422 for `return` / `correct` / `proposals` that cannot be honoured, before any work."""
    if body.returns and answer_format == "npy":
        raise Problem(422, "return_needs_json", "`return` adds per-draw arrays to a JSON answer: ask for "
                      "Accept: application/json (a correction alone works with .npy: its diagnostics are headers)")
    if len(set(body.returns)) != len(body.returns):
        raise Problem(422, "return_invalid", "`return` lists each of 'log_q', 'log_weights' at most once")
    if body.proposals is not None:
        if body.correct is None:
            raise Problem(422, "proposals_invalid", "`proposals` is only used with `correct`")
        if not body.n <= body.proposals <= MAX_PROPOSALS_PER_DRAW * body.n:
            raise Problem(422, "proposals_invalid", f"proposals must be between n ({body.n}) and "
                          f"{MAX_PROPOSALS_PER_DRAW}·n ({MAX_PROPOSALS_PER_DRAW * body.n})")


def prepare_draws(request: Request, tenant: str, sampler_id: str, body: SampleRequest, settings: Any,
                  answer_format: str) -> tuple[list[list[float]] | None, str, str, dict[str, Any] | None]:
    """(x, weights path, weights sha256, the job's target spec when log weights or a correction need it) for a
    draw, from a session closed on return; 404/413/422 first."""
    target_spec = None
    with request.app.state.session_factory() as session:
        samplers = Samplers(session, tenant)
        sampler = samplers.owned(sampler_id)
        config = sampler.config
        weights = samplers.artifacts(sampler).get("weights")
        weights_path, weights_sha = (weights.path, weights.sha256) if weights is not None else ("", "")
        if "log_weights" in body.returns or body.correct is not None:
            target_spec = samplers.job_target(sampler)
    if (body.returns or body.correct) and config.get("generator", {}).get("kind") == "spg":
        raise spg_density_unavailable()
    if ("log_weights" in body.returns or body.correct is not None) and target_spec is None:
        raise Problem(422, "log_weights_unavailable", "this sampler's job holds no target to weigh against")
    x = check_inputs(body, config, settings)
    check_answer_size(body.n, values_per_draw(config, x) + len(body.returns), answer_format, settings)
    if weights is None:
        raise Problem(404, "not_found", "this sampler has no stored weights")
    return x, weights_path, weights_sha, target_spec


def check_answer_size(n: int, per_draw: int, answer_format: str, settings: Any) -> None:
    """413 limit_exceeded before any work when the answer's estimated size is over `max_sample_bytes`."""
    estimate = n * per_draw * BYTES_PER_VALUE[answer_format]
    if estimate > settings.max_sample_bytes:
        hint = "; ask for fewer draws" + ("" if answer_format == "npy" else ", or Accept: application/x-npy "
                                           "(4 bytes a value)")
        raise Problem(413, "limit_exceeded", f"{n} draws × {per_draw} values is about {estimate} bytes as "
                      f"{answer_format}, over the cap of {settings.max_sample_bytes} bytes per answer{hint}")


@router.delete("/{sampler_id}", status_code=204)
def delete_sampler(sampler_id: str, request: Request, session: SessionDep, tenant: CurrentTenant,
                   store: StoreDep) -> Response:
    for artifact in Samplers(session, tenant).delete(sampler_id, store):
        request.app.state.sampler_cache.discard(artifact.sha256)
    return Response(status_code=204)
