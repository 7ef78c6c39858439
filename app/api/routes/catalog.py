"""What Parvis can do: methods with their option schemas, and target kinds with theirs."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.deps import CurrentTenant
from app.api.schemas import MethodList, MethodOut, TargetKindList
from inference_core.catalog import METHODS, TARGET_KINDS

router = APIRouter(prefix="/v1", tags=["catalog"])


@router.get("/methods", response_model=MethodList)
def list_methods(_tenant: CurrentTenant) -> MethodList:
    return MethodList(
        methods=[
            MethodOut(
                name=m.name,
                family=m.family,
                summary=m.summary,
                paper=m.paper,
                target_kinds=sorted(m.target_kinds),
                options_schema=m.schema.model_json_schema(),
                max_processes=m.max_processes,
                shares=m.shares,
            )
            for m in METHODS.values()
        ]
    )


@router.get("/targets/kinds", response_model=TargetKindList)
def list_target_kinds(_tenant: CurrentTenant) -> TargetKindList:
    return TargetKindList(
        kinds=[
            {"kind": k.name, "summary": k.summary, "has_reference": k.has_reference,
             "schema": k.schema.model_json_schema()}
            for k in TARGET_KINDS.values()
        ]
    )
