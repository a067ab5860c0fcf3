"""One dnf transaction per node for the package updates of a node's services.

A packages unit on a controller updates the packages of 20 or so services, and every catalog
entry writes its update as `dnf -y update PKG...`: rendered as written that is one dnf
transaction, one Ansible module run, per service. Services' tasks in that exact form
(`canonical_update`) that follow each other in a unit become one task that updates all their
packages on each node in one transaction (as TripleO's and Kolla's own package updates do):
the same packages end at the same versions, with one dependency resolution per node. A task
in any other form (options, conditions, a register read by a later task) is left as written
and closes the batch before it, so nothing is reordered across it.
"""

from __future__ import annotations

import re
from typing import Any

#: the play variable of the batched updates: one node -> packages map per batch
UPDATE_VAR = "stepwise_dnf_update"
#: the register of a batched update (a service's own register name is not kept)
REGISTER = "stepwise_dnf"

_COMMAND = "dnf -y update"
#: how stepwise's own package updates (the batched one here, the unowned packages' one in
#: node_work) template their argv: the dnf update of the names an expression evaluates to
_ARGV_HEAD = "{{ ['dnf', '-y', 'update'] + "

_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:-]*\Z")
#: services a batch's task names (a controller's 18 would not fit a line)
NAMED = 4
_KEYS = {"name", "ansible.builtin.command", "register", "changed_when"}


def update_argv(names: str) -> str:
    """The argv template of stepwise's own update of the packages `names` evaluates to."""
    return f"{_ARGV_HEAD}{names} }}}}"


def update_expression(argv: object) -> str | None:
    """The expression (without its braces) of an argv `update_argv` wrote, else None."""
    if isinstance(argv, str) and argv.startswith(_ARGV_HEAD) and argv.endswith(" }}"):
        return argv[3:-3]
    return None


def canonical_update(task: dict[str, Any]) -> tuple[str, ...] | None:
    """The packages of a task written as the catalog's package update (`dnf -y update PKG...`,
    registered, changed unless dnf says "Nothing to do"), or None for any other task."""
    cmd = task.get("ansible.builtin.command")
    if not isinstance(cmd, str) or not set(task) <= _KEYS:
        return None
    words = cmd.split()
    packages = words[len(_COMMAND.split()) :]
    if " ".join(words[: -len(packages) or None]) != _COMMAND or not packages:
        return None
    if not all(_PACKAGE.match(w) for w in packages):
        return None
    register = task.get("register")
    expected = f"'Nothing to do' not in {register}.stdout" if register else None
    if task.get("changed_when") != expected:
        return None
    return tuple(packages)


class UpdateBatches:
    """The batches of one unit's play, in the order their first service came."""

    def __init__(self) -> None:
        self.batches: list[dict[str, list[str]]] = []
        self._services: list[list[str]] = []
        self._tasks: list[dict[str, Any]] = []
        self._open = False

    def add(self, service: str, nodes: list[str], packages: tuple[str, ...]) -> dict | None:
        """Take `service`'s update of `packages` on `nodes`: the new batch's task to place
        where this update was (the first of a batch), or None (joined the open batch)."""
        if not self._open:
            self.batches.append({})
            self._services.append([])
            self._tasks.append(self._task(len(self.batches) - 1))
            self._open = True
        batch = self.batches[-1]
        for n in nodes:
            have = batch.setdefault(n, [])
            have.extend(p for p in packages if p not in have)
        self._services[-1].append(service)
        self._tasks[-1]["name"] = _name(self._services[-1])
        return self._tasks[-1] if len(self._services[-1]) == 1 else None

    def close(self) -> None:
        """A task that is not a batched update comes next: later updates start a new batch."""
        self._open = False

    @staticmethod
    def _task(index: int) -> dict[str, Any]:
        var = f"{UPDATE_VAR}[{index}]"
        return {
            "name": "",
            "ansible.builtin.command": {"argv": update_argv(f"{var}[inventory_hostname]")},
            "register": REGISTER,
            "changed_when": f"'Nothing to do' not in {REGISTER}.stdout",
            "when": f"inventory_hostname in {var}",
        }


def _name(services: list[str]) -> str:
    if len(services) == 1:
        return f"Update the {services[0]} packages"
    named = ", ".join(services[:NAMED])
    more = f" and {len(services) - NAMED} more" if len(services) > NAMED else ""
    return f"Update the packages of {named}{more} (one dnf transaction per node)"
