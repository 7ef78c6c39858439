"""Post-processing of the generated OpenAPI document: the problem responses (RFC 9457,
`application/problem+json`) each operation can give, and which operations need an API key.

FastAPI documents only the success response and its own 422 (`HTTPValidationError`, `application/json`), but
every error here is a problem body (app/api/problems.py). The problem statuses of an operation follow from
what the route is, not from a list kept by hand, so a new route is documented without touching this file.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from app.api.deps import get_current_tenant
from app.api.problems import PROBLEM_MEDIA_TYPE
from inference_core.catalog import METHODS, TARGET_KINDS

try:
    from fastapi.routing import iter_route_contexts
except ImportError:  # FastAPI before included routers stayed nested in app.routes: the list is already flat
    def iter_route_contexts(routes):  # type: ignore[no-redef]  # noqa: ANN001, ANN202
        return iter(routes)

SECURITY_SCHEME = "bearer"

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "type": "object",
    "description": "An RFC 9457 problem. `code` is stable and machine-readable; some codes add fields "
                   "(e.g. `loc`, the location of the invalid value).",
    "properties": {
        "type": {"type": "string", "description": "`urn:parvis:problem:<code>`"},
        "title": {"type": "string", "description": "the HTTP status phrase"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "what went wrong, for a person"},
        "code": {"type": "string", "description": "stable machine code, e.g. `not_found`, `spec_invalid`"},
        "request_id": {"type": "string", "description": "quote it when reporting a problem"},
    },
    "required": ["type", "title", "status", "detail", "code", "request_id"],
    "additionalProperties": True,
}

RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "string"}}}

#: 422 codes that a request the document allows can still get, for a reason JSON Schema cannot state: a relation
#: between fields (x_min < x_max, y as long as X, `proposals` only with `correct`, a method that takes the target's
#: kind, ranks a method can share), a target kind's own fields (GET /v1/targets/kinds), the state of the object
#: named (a sampler with no predictive model, a target that is not 2-D, x's width against the model), a signed page
#: token, or a deployment's caps. `request_invalid` (the document's own constraints), `method_unknown` and
#: `target_kind_unknown` (enums in the document) are never among them; the schemathesis run in CI holds the server
#: to this list (tests/integration/test_schemathesis.py).
SEMANTIC_422_CODES = frozenset({
    "spec_invalid", "target_invalid", "method_options_invalid", "method_unsupported_for_target", "limit_exceeded",
    "target_nonfinite", "bounds_invalid", "density_unsupported", "density_unavailable", "dataset_invalid",
    "proposals_invalid", "return_invalid", "return_needs_json", "x_required", "x_not_accepted", "x_shape_invalid",
    "x_nonfinite", "log_weights_unavailable", "onnx_unavailable", "predict_unsupported", "input_invalid",
    "output_nonfinite", "retention_too_long", "page_token_invalid", "points_invalid", "target_unsupported",
    "processes_unsupported", "processes_over_cap",
})

PROBLEM_DESCRIPTIONS = {
    400: "the body could not be parsed (`bad_request`)",
    401: "no valid API key (`unauthorized`)",
    404: "no such object for this tenant (`not_found`)",
    406: "`Accept` names no media type this route produces (`not_acceptable`)",
    408: "the body did not arrive in full in time (`request_timeout`)",
    409: "conflicts with the current state (e.g. `job_not_finished`, `dataset_in_use`)",
    410: "the object has expired and awaits deletion (`expired`)",
    413: "the body or the requested size is over a limit (`payload_too_large`, `limit_exceeded`)",
    415: "the body's media type is not supported (`unsupported_media_type`)",
    422: "the request is invalid: `request_invalid` (a constraint stated in this document), `idempotency_key_reused`, "
         "or a code for what JSON Schema cannot state (a relation between fields, a target kind's own fields, the "
         "state of the object named, a deployment's cap): " + ", ".join(f"`{code}`" for code in sorted(SEMANTIC_422_CODES)),
    429: "a quota or rate limit is reached (`quota_exceeded`); see `Retry-After`",
    503: "a dependency (database, queue) is unavailable, or this process is overloaded (`overloaded`); see "
         "`Retry-After`",
}
PROBLEM_HEADERS = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    429: RETRY_AFTER,
    503: RETRY_AFTER,
}
_FASTAPI_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _api_routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    for route in iter_route_contexts(routes):
        original = getattr(route, "original_route", route)
        if isinstance(original, APIRoute) and original.include_in_schema:
            yield original


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def requires_api_key(route: APIRoute) -> bool:
    return get_current_tenant in set(_calls(route.dependant))


def problem_statuses(method: str, operation: dict[str, Any], authenticated: bool) -> set[int]:
    """The problem statuses an operation can answer with, from its shape:
    - tenant routes: 401 (key), 422 (input), 429 (quota), 503 (the key lookup itself needs the database);
    - a path parameter names an object: 404 when it is not the tenant's, 410 once it has expired;
    - a write (any method but GET) can conflict with the current state, 409 (a job not finished, a dataset in
      use, an idempotency key reused), and so can reading an object's array (particles exist once it finished);
    - a request body: 400 (unparseable), 408 (not sent in time), 413 (too large), 415 when several media
      types are accepted;
    - an array answer negotiated between JSON and `.npy`: 406."""
    statuses = {401, 422, 429, 503} if authenticated else set()
    names_object = any(p.get("in") == "path" for p in operation.get("parameters", []))
    negotiated = "application/x-npy" in operation.get("responses", {}).get("200", {}).get("content", {})
    if names_object:
        statuses |= {404, 410}
    if authenticated and (method != "get" or (names_object and negotiated)):
        statuses.add(409)
    if negotiated:
        statuses.add(406)
    body = operation.get("requestBody")
    if body is not None:
        statuses |= {400, 408, 413, 422}
        if len(body.get("content", {})) > 1:
            statuses.add(415)
    return statuses


def _is_fastapi_default(response: dict[str, Any]) -> bool:
    """FastAPI's own 422 (or a route's bare `responses={status: {...}}`, whose body FastAPI leaves unnamed)."""
    schemas = [media.get("schema") for media in response.get("content", {}).values()]
    return not any(schemas) or any(s.get("$ref", "").endswith("/HTTPValidationError") for s in schemas if s)


def _problem_response(status: int, existing: dict[str, Any] | None) -> dict[str, Any]:
    description = (existing or {}).get("description")
    if not description or description == "Validation Error":
        description = PROBLEM_DESCRIPTIONS[status]
    response: dict[str, Any] = {"description": description, "content": {
        PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}}
    if status in PROBLEM_HEADERS:
        response["headers"] = PROBLEM_HEADERS[status]
    return response


def target_schema() -> dict[str, Any]:
    """A target spec as the document states it: an object whose `kind` is one of the catalog's (the kind's own
    fields are checked by the kind's schema, `GET /v1/catalog`)."""
    return {"type": "object", "required": ["kind"], "additionalProperties": True,
            "description": "a target spec: `kind` and that kind's fields (see GET /v1/catalog)",
            "properties": {"kind": {"type": "string", "enum": sorted(TARGET_KINDS)}}}


def state_catalog_enums(schema: dict[str, Any]) -> None:
    """In place: the methods and target kinds the server knows, as enums of the bodies that name them (the
    models keep plain strings, so an unknown name gets its own stable code, `method_unknown`,
    `target_kind_unknown`, rather than a generic validation error)."""
    components = schema.get("components", {}).get("schemas", {})
    methods = sorted(METHODS)
    for name in ("JobSpec", "ValidateRequest"):
        properties = components.get(name, {}).get("properties", {})
        if "target" in properties:
            properties["target"] = {**target_schema(), "title": properties["target"].get("title", "Target")}
        method = properties.get("method")
        for branch in (method or {}).get("anyOf", [method] if method else []):
            if branch.get("type") == "string":
                branch["enum"] = methods


def bound_query_parameter(schema: dict[str, Any], path: str, method: str, name: str, *, minimum: int,
                          maximum: int) -> None:
    """In place: state the range of an integer query parameter that the route checks itself (to answer with its
    own stable code, e.g. `limit_exceeded` for a density grid over the deployment's cap)."""
    for parameter in schema["paths"][path][method].get("parameters", []):
        if parameter.get("name") == name and parameter.get("in") == "query":
            for branch in parameter["schema"].get("anyOf", [parameter["schema"]]):
                if branch.get("type") == "integer":
                    branch.update(minimum=minimum, maximum=maximum)


def add_problem_responses(schema: dict[str, Any], routes: Sequence[BaseRoute]) -> None:
    """Document the problem responses of every operation, in place, and mark the ones that need a key."""
    authenticated = {(method.lower(), route.path_format)
                     for route in _api_routes(routes) if requires_api_key(route) for method in route.methods}
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
    components.setdefault("securitySchemes", {})[SECURITY_SCHEME] = {"type": "http", "scheme": "bearer"}
    for path, item in schema.get("paths", {}).items():
        for method, operation in item.items():
            needs_key = (method, path) in authenticated
            if needs_key:
                operation["security"] = [{SECURITY_SCHEME: []}]
            responses = operation.setdefault("responses", {})
            statuses = problem_statuses(method, operation, needs_key)
            statuses |= {int(code) for code in responses if code.isdigit() and int(code) in PROBLEM_DESCRIPTIONS}
            for status in statuses:
                existing = responses.get(str(status))
                if existing is None or _is_fastapi_default(existing):
                    responses[str(status)] = _problem_response(status, existing)
            operation["responses"] = dict(sorted(responses.items()))
    if not any(f"/{name}\"" in json.dumps(schema["paths"]) for name in _FASTAPI_VALIDATION_SCHEMAS):
        for name in _FASTAPI_VALIDATION_SCHEMAS:
            components["schemas"].pop(name, None)
