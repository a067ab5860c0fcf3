"""What each `-e` variable a plan reads must look like.

Which variables the plans read is the workflow table's (`WorkflowEntry.variables`); this module
says what a valid value of each is, with the same patterns as the deployment's own fields (a
target namespace is checked as `containers.upgrade_namespace` is). The CLI checks `-e` with it
before anything is planned or any node is contacted, and `verify.plan_verified` checks again
what it records in a plan, so a value read back from a stored run is held to the same rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.choices import UpgradeMode
from stepwise.model.container_specs import NAMESPACE_RE

#: what a release may be called (it names repositories and is recorded per node)
RELEASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
_NAMESPACE = re.compile(NAMESPACE_RE)
#: a namespace's length limit, as the deployment's `containers:` fields have it
_NAMESPACE_MAX = 255

#: variable -> (how a value is checked, what it is not, what it must be)
_RULES: Mapping[str, tuple[Callable[[str], Any], str, str]] = {
    "target_release": (
        lambda v: RELEASE_RE.fullmatch(v),
        "a release name",
        "letters, digits, '.', '_', '+', '-' (e.g. -e target_release=R2)",
    ),
    "target_namespace": (
        lambda v: len(v) <= _NAMESPACE_MAX and _NAMESPACE.fullmatch(v),
        "an image namespace",
        "what the deployment's containers.upgrade_namespace may be: lowercase letters, digits "
        "and '.', '_', '-' in components separated by '/' (e.g. -e target_namespace=tripleo-next)",
    ),
    "system_upgrade_mode": (
        lambda v: v in tuple(UpgradeMode),
        "a way to upgrade an OS",
        f"one of {', '.join(UpgradeMode)}",
    ),
}

#: every variable a rule exists for (the table's list is checked against it)
RULED = frozenset(_RULES)


def checked_variables(variables: Mapping[str, Any], file: str | None = None) -> dict[str, Any]:
    """`variables` with each plan variable among them checked (a release given as a number
    becomes its text); other variables are returned as they are. Raises InputError naming the
    variable, its value and what it must be; `file` is where the values came from, if a file."""
    out = dict(variables)
    for name, (valid, kind, must) in _RULES.items():
        if out.get(name) is None:  # null is not given (-e '{"target_release": null}')
            continue
        value = out[name]
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str) or not valid(text):
            shown = text if isinstance(text, str) else type(value).__name__
            if len(shown) > 80:
                shown = f"{shown[:80]}... ({len(shown):,} characters)"
            raise InputError(
                Problem(
                    f"{name} '{shown}' is not {kind}",
                    file=file,
                    field="-e",
                    hint=must,
                )
            )
        out[name] = text
    return out
