"""A plan read back (the store keeps each run's plan as JSON) is input: validated by a model
of the plan's JSON contract before anything is built from it.

`Plan.from_json` and the resume checks call `check_plan_doc`; a document that does not fit
(not a mapping, a unit with an unknown step, a duration that is not a finite number, nodes
that are not a list of names, params that are not a mapping) is an InputError naming the
field (exit 2), never a KeyError or a ValueError deep in a reader (exit 70).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from stepwise.errors import InputError, Problem
from stepwise.model.vocab import Phase, Scope, Stage, Step, Workflow

#: the largest time a stored plan may name (a century of seconds): sums of such stay finite
MAX_SECONDS = 3.2e9

Name = str
Seconds = float
_FINITE = ConfigDict(extra="ignore", allow_inf_nan=False, strict=False)


class _UnitDoc(BaseModel):
    model_config = _FINITE

    id: str = Field(max_length=300)
    step: Step
    nodes: list[Name] = Field(default_factory=list)
    services: list[Name] = Field(default_factory=list)
    after: list[Name] = Field(default_factory=list)
    stops: dict[Name, list[Name]] = Field(default_factory=dict)
    starts: dict[Name, list[Name]] = Field(default_factory=dict)
    why: str = ""
    stage: Stage = Stage.RUN
    phase: Phase = Phase.NONE
    scope: Scope = Scope.NODE
    batch: str | None = None
    duration_s: Seconds = Field(0.0, ge=0, le=MAX_SECONDS)
    tags: list[Name] = Field(default_factory=list)
    idempotent: bool = True
    work: dict[Name, list[Name]] | None = None
    vars: dict[Name, Any] = Field(default_factory=dict)
    start_s: Seconds = Field(0.0, ge=-MAX_SECONDS, le=MAX_SECONDS)
    end_s: Seconds = Field(0.0, ge=-MAX_SECONDS, le=MAX_SECONDS)
    marks: list[Name] = Field(default_factory=list)
    requires: list[Name] = Field(default_factory=list)
    seed_step: int | None = Field(None, ge=1, le=12)


class _EstimateDoc(BaseModel):
    model_config = _FINITE

    duration_s: Seconds = Field(0.0, ge=0, le=MAX_SECONDS)
    lower_bound_s: Seconds = Field(0.0, ge=0, le=MAX_SECONDS)
    prestage_s: Seconds = Field(0.0, ge=0, le=MAX_SECONDS)
    prestage_bound_s: Seconds = Field(0.0, ge=0, le=MAX_SECONDS)


class _WindowDoc(BaseModel):
    model_config = _FINITE

    service: Name
    start_s: Seconds = Field(ge=-MAX_SECONDS, le=MAX_SECONDS)
    end_s: Seconds | None = Field(None, ge=-MAX_SECONDS, le=MAX_SECONDS)
    why: str = ""


class _PlanDoc(BaseModel):
    model_config = _FINITE

    workflow: Workflow
    deployment: str = ""
    units: list[_UnitDoc]
    estimate: _EstimateDoc = Field(default_factory=_EstimateDoc)
    windows: list[_WindowDoc] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)


def check_plan_doc(doc: Any, source: str = "the recorded plan") -> dict[str, Any]:
    """`doc` as a plan's JSON (as `Plan.to_json` writes it), every field of the type the
    contract says (defaults filled in); InputError naming the first field that is not."""
    if not isinstance(doc, Mapping):
        raise InputError(
            Problem(
                f"{source} is not a plan (a mapping with workflow and units)",
                field="--store",
                hint="the store was changed outside stepwise",
            )
        )
    try:
        return _PlanDoc.model_validate(doc).model_dump(mode="json")
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise InputError(
            Problem(
                f"{source} is damaged: {where}: {err['msg']}",
                field="--store",
                hint="the store was changed outside stepwise: restore it from a backup, or "
                "give a new one with --store",
            )
        ) from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise InputError(
            Problem(f"{source} is damaged: {type(exc).__name__}", field="--store")
        ) from None
