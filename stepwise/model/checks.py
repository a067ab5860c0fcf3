"""Turn schema violations into Problems that name file, line, field and the fix."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from stepwise.errors import InputError, Problem
from stepwise.model.specs import UNION_TAGS
from stepwise.model.yamlsrc import field_name, line_of

M = TypeVar("M", bound=BaseModel)


def _hint(err: dict[str, Any], model: type[BaseModel], loc: tuple, raw_loc: tuple) -> str | None:
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, raw_loc[:-1])
        if allowed:
            return f"remove it or use one of: {', '.join(allowed)}"
        return "remove it"
    if kind == "missing":
        return f"add '{loc[-1]}'"
    return None


def _allowed_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    """Field names valid at `loc` (walking nested models; list indexes skipped; a union tag
    such as '(count)' selects the member the input was validated against)."""
    current: Any = model
    for key in loc:
        if isinstance(key, int):
            continue
        if key in UNION_TAGS:
            current = UNION_TAGS[key]
            continue
        fields = getattr(current, "model_fields", None)
        if not fields:
            return []
        found = None
        for fname, f in fields.items():
            if (f.alias or fname) == key:
                found = f
        if found is None:
            return []
        current = _model_in(found.annotation)
        if current is None:
            return []
    fields = getattr(current, "model_fields", None) or {}
    return [f.alias or n for n, f in fields.items()]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _clean_loc(loc: tuple, data: Any = None) -> tuple:
    """The location without pydantic's union member names (e.g. 'list[NodeSpec]', '(count)').
    A key the input really has is kept even with brackets in it: the location is walked
    along the data, and only names that are not keys there are taken for union tags."""
    out: list = []
    node = data
    for k in loc:
        if isinstance(node, dict) and k in node:
            out.append(k)
            node = node[k]
        elif isinstance(k, int):
            out.append(k)
            node = node[k] if isinstance(node, list) and 0 <= k < len(node) else None
        elif not any(c in str(k) for c in "[]()"):
            out.append(k)
            node = None
    return tuple(out)


def validate(model: type[M], data: Any, doc: Any, filename: str) -> M:
    """Validate `data` against `model`; on failure raise InputError with one Problem per fault."""
    if data is None:
        raise InputError(
            Problem(
                "the file is empty",
                file=filename,
                hint=f"write a {model.__name__.removesuffix('Spec').lower()} mapping",
            )
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems: list[Problem] = []
        seen: set[tuple] = set()
        for err in exc.errors():
            raw_loc = tuple(err["loc"])
            loc = _clean_loc(raw_loc, data)
            msg = err["msg"].removeprefix("Value error, ")
            if err.get("type") == "extra_forbidden":
                msg = f"unknown key '{(loc or raw_loc or ('?',))[-1]}'"
            key = (loc, msg)
            if key in seen:
                continue
            seen.add(key)
            problems.append(
                Problem(
                    msg,
                    file=filename,
                    line=line_of(doc, loc),
                    field=field_name(loc) or None,
                    hint=_hint(err, model, loc, raw_loc),
                )
            )
        raise InputError(problems) from None
