"""What is read back from the store is input: every row is checked before anyone uses it.

SQLite keeps any value in any column (a text in an INTEGER column, a number in a JSON one),
and a store file can be edited by anyone who can write it. Readers (history, status, report,
plan, resume) used to take the rows as they came and crashed on a tampered one (exit 70). Now
each row is checked against its column's declared type, length and meaning (a unit's step is a
step stepwise knows, a state one it writes, numbers are finite) and a value that is not is an
InputError naming the table, the column and the row (exit 2). The JSON documents inside
(a run's plan, its facts) are validated where they are parsed, by the models of the files they
come from (`Plan.from_json`, `facts_from_dict`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from typing import Any, TypeVar

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer, String, Text
from sqlalchemy.orm.attributes import set_committed_value

from stepwise.errors import InputError, Problem
from stepwise.model.limits import MAX_STRING
from stepwise.model.vocab import (
    RECORDED_RUN_STATES,
    MarkerState,
    RunState,
    Step,
    TaskStatus,
    UnitState,
)

R = TypeVar("R")

#: the columns that hold a word of the vocabulary, and its type
VOCABULARY: dict[tuple[str, str], type[StrEnum]] = {
    ("runs", "status"): RunState,
    ("units", "state"): UnitState,
    ("units", "step"): Step,
    ("task_results", "status"): TaskStatus,
    ("markers", "state"): MarkerState,
}
#: what stepwise writes in the columns that name a state (anything else was written by hand)
ALLOWED: dict[tuple[str, str], frozenset[str]] = {
    **{column: frozenset(kind) for column, kind in VOCABULARY.items()},
    ("runs", "status"): frozenset(RECORDED_RUN_STATES),
}
#: JSON columns that hold a list of names, and those that hold a mapping
LISTS = frozenset({("units", "nodes"), ("units", "services")})
_INT_MAX = 2**63 - 1


def _bad(table: str, column: str, key: Any, what: str, where: str) -> InputError:
    return InputError(
        Problem(
            f"the state store is damaged: {table}.{column} of row {key}: {what}",
            file=where,
            field="--store",
            hint="the store was changed outside stepwise: restore it from a "
            "backup, or give a new one with --store",
        )
    )


def _check_value(table: str, column: Any, value: Any) -> str | None:
    """Why `value` cannot be in `column`, or None."""
    if value is None:
        return None if column.nullable else "is empty"
    kind = column.type
    if isinstance(kind, (String, Text)):
        if not isinstance(value, str):
            return f"is {type(value).__name__}, not text"
        # not the column's declared width: SQLite never enforced it, and a long --limit made
        # run keys longer than 1,000 in good faith; what readers need is a bounded string
        # (the facts' own limits are FactsSpec's, applied where facts are built)
        if len(value) > MAX_STRING:
            return f"is {len(value):,} characters long (at most {MAX_STRING:,})"
        allowed = ALLOWED.get((table, column.key))
        if allowed is not None and value not in allowed:
            return f"'{value[:60]}' is not one of {', '.join(sorted(allowed))}"
    elif isinstance(kind, Boolean):
        if not isinstance(value, bool):
            return "is not a boolean"
    elif isinstance(kind, Integer):
        if isinstance(value, bool) or not isinstance(value, int) or abs(value) > _INT_MAX:
            return "is not a whole number"
    elif isinstance(kind, Float):
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            return "is not a finite number"
    elif isinstance(kind, DateTime):
        if not isinstance(value, datetime):
            return "is not a timestamp"
    elif isinstance(kind, JSON):
        if (table, column.key) in LISTS:
            if not isinstance(value, list) or not all(
                isinstance(v, str) and len(v) <= MAX_STRING for v in value
            ):
                return "is not a list of names"
        elif not isinstance(value, dict):
            return "is not a mapping"
    return None


def checked(rows: Iterable[R], where: str) -> list[R]:
    """`rows` (ORM rows of any store table) once every column of each is a value its reader
    can use, its vocabulary columns as enum members; InputError naming the first that is not.
    `where` names the store (no password)."""
    out = list(rows)
    for row in out:
        table = row.__table__  # type: ignore[attr-defined]
        key = ", ".join(str(getattr(row, c.key, "?")) for c in table.primary_key.columns)
        for column in table.columns:
            value = getattr(row, column.key)
            why = _check_value(table.name, column, value)
            if why:
                raise _bad(table.name, column.key, key[:120], why, where)
            kind = VOCABULARY.get((table.name, column.key))
            if kind is not None and value is not None:
                # as if loaded so: the row stays clean, nothing is written back
                set_committed_value(row, column.key, kind(value))
    return out


def one(row: R | None, where: str) -> R | None:
    """One row (or None), checked as `checked` checks rows."""
    return None if row is None else checked([row], where)[0]
