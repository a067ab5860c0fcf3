"""Once-only units (the seed's data transfer, the OS upgrade's by-name steps): the flag file
on the node that says a unit completed there, the store's marker keys that mirror it, and the
guard tasks around the unit's play."""

from __future__ import annotations

import re
import shlex
from typing import Any

from stepwise.plan.units import Unit
from stepwise.run.node_work import FLAG_DIR


def flag_hosts(unit: Unit) -> list[str]:
    """Where a once-only unit keeps its flag file: its nodes (the transfer's target)."""
    return list(unit.nodes)


def flag_name(unit: Unit) -> str:
    """The name of the unit's flag file in the node's flag directory."""
    return "stepwise-" + re.sub(r"[^A-Za-z0-9_.-]", "_", str(unit.step)) + ".flag"


def marker_keys(unit: Unit) -> list[str]:
    """Store marker keys of a once-only unit (one per flag host)."""
    return [f"{unit.step}@{h}" for h in flag_hosts(unit)]


def guard_tasks(unit: Unit, run_id: int | str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A once-only unit refuses to run where its flag file says it completed (the seed's
    data-transfer flag, removed only by hand). The flag marks success, not an attempt: it is
    written after the work; a failed attempt leaves only an attempt record, and a retry runs.
    When the flag names this very run and unit (stepwise was killed before recording it),
    the unit is passed as done."""
    name = flag_name(unit)
    token = f"run={run_id} unit={unit.id}"
    path = f"{FLAG_DIR}/{name}"
    check = (
        f'f="{path}"\n'
        f'if [ -e "$f" ] && grep -qxF {shlex.quote(token)} "$f"; '
        "then echo STEPWISE_ALREADY_DONE; exit 0; fi\n"
        'msg="refusing: $f exists on {{ inventory_hostname }}"\n'
        f'msg="$msg: {unit.step} already completed here ($(cat "$f" 2>/dev/null))"\n'
        'msg="$msg; it must never run twice. Remove the flag file by hand only if you are sure."\n'
        'if [ -e "$f" ]; then echo "$msg" >&2; exit 3; fi\n'
        'mkdir -p "$(dirname "$f")"\n'
        'if [ -e "$f.attempt" ]; then echo "a previous attempt ($(cat "$f.attempt")) '
        'did not complete: running again"; fi\n'
        f'echo {shlex.quote(token)} > "$f.attempt"\n'
    )
    pre = [
        {
            "name": f"Stepwise: {unit.step} runs at most once (flag file)",
            "ansible.builtin.shell": check,
            "register": "_stepwise_flag",
            "changed_when": "'STEPWISE_ALREADY_DONE' not in _stepwise_flag.stdout",
        },
        {
            "name": "Stepwise: already done by this run",
            "ansible.builtin.meta": "end_host",
            "when": "'STEPWISE_ALREADY_DONE' in _stepwise_flag.stdout",
        },
    ]
    post = [
        {
            "name": f"Stepwise: mark {unit.step} completed (flag file)",
            "ansible.builtin.shell": f'f="{path}"\necho {shlex.quote(token)} > "$f"\n'
            'rm -f "$f.attempt"\n',
            "changed_when": True,
        }
    ]
    return pre, post
