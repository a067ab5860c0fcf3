"""Limits on what stepwise accepts as input, and the checks that enforce them before any
input is turned into values.

Every file (deployment, catalog, facts, `-e @file`, inventory) is bounded in size, nesting
depth, number of YAML nodes *after alias expansion* (a 1 KB "billion laughs" document expands
to billions of nodes) and string length; numbers must be finite; counted nodes are bounded.
The YAML checks run over libyaml's event stream, which is flat (no recursion, no object
built), so a hostile document is refused in the time it takes to read it, and a deeply nested
one never reaches the recursive constructor (100,000 `[` crash libyaml's composer).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import yaml

from stepwise.errors import InputError, Problem
from stepwise.paths import MAX_INPUT_BYTES

#: largest input file (a 10,000-node deployment written as a list is about 1 MiB)
MAX_FILE_BYTES = MAX_INPUT_BYTES
#: deepest nesting of mappings and sequences (catalog task lists need fewer than 15 levels)
MAX_DEPTH = 64
#: YAML nodes of a document once every alias is expanded
MAX_YAML_NODES = 2_000_000
#: longest string (a scalar of a file, a value of `-e`)
MAX_STRING = 1024 * 1024
#: most nodes a deployment may have (`count:` included); the planner is measured at 10,000
MAX_NODES = 100_000
#: the largest `start:` of a counted role (its names stay short)
MAX_INDEX = 10**9
#: the longest a step of a service on a node may be said to last (a week); with MAX_NODES
#: nodes every sum of such stays finite (durations that were each finite added up to
#: infinity: half a JSON document, then a crash); the plan's total is bounded too
MAX_STEP_SECONDS = 7 * 24 * 3600


def _problem(message: str, filename: str, mark: Any = None, hint: str | None = None) -> InputError:
    line = mark.line + 1 if mark is not None else None
    return InputError(Problem(message, file=filename, line=line, hint=hint))


def check_text_size(text: str | bytes, filename: str) -> None:
    """Refuse a file larger than MAX_FILE_BYTES before parsing it."""
    if len(text) > MAX_FILE_BYTES:
        raise InputError(
            Problem(
                f"the file is too large ({len(text):,} bytes; at most {MAX_FILE_BYTES:,})",
                file=filename,
                hint="split it, or check that this is the file you meant",
            )
        )


def check_yaml_events(text: str, filename: str, loader: type = yaml.SafeLoader) -> None:
    """Walk the YAML event stream and refuse documents over the depth, expanded-size or string
    limits. Syntax errors are left to the real parse, which reports them with their line."""
    sizes: dict[str, int] = {}  # anchor -> expanded node count of the anchored node
    stack: list[tuple[str | None, int]] = []  # open collections: (anchor, expanded count at start)
    total = 0
    events: Iterable[yaml.Event] = yaml.parse(text, Loader=loader)
    try:
        for ev in events:
            if isinstance(ev, yaml.AliasEvent):
                total += sizes.get(ev.anchor, 1)
            elif isinstance(ev, yaml.ScalarEvent):
                total += 1
                if len(ev.value) > MAX_STRING:
                    raise _problem(
                        f"a string of {len(ev.value):,} characters (at most {MAX_STRING:,})",
                        filename,
                        ev.start_mark,
                    )
                if ev.anchor:
                    sizes[ev.anchor] = 1
            elif isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                total += 1
                stack.append((ev.anchor, total))
                if len(stack) > MAX_DEPTH:
                    raise _problem(
                        f"nested more than {MAX_DEPTH} levels deep",
                        filename,
                        ev.start_mark,
                        hint="flatten the structure; no stepwise input needs this depth",
                    )
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, start = stack.pop()
                if anchor:
                    sizes[anchor] = total - start + 1
            if total > MAX_YAML_NODES:
                raise _problem(
                    f"the document expands to more than {MAX_YAML_NODES:,} values "
                    "(aliases included)",
                    filename,
                    getattr(ev, "start_mark", None),
                    hint="write the values out instead of multiplying them "
                    "through anchors and aliases",
                )
    except yaml.YAMLError:
        return  # the parse that follows reports it, with its line


def check_finite(value: Any, where: str, filename: str | None = None) -> None:
    """Refuse NaN and infinities anywhere in a value: they are no duration, count or version,
    and JSON cannot carry them."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            raise InputError(
                Problem(
                    f"'{v}' is not a finite number",
                    file=filename,
                    field=where,
                    hint="give a finite number",
                )
            )
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
