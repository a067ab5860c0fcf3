"""Author feedback on a catalog entry's tasks: a few rules of ansible-lint (the ones an export
of the built-in catalog was failing), checked where the task is written, with its file and
line. `load_catalog` runs them on every file it loads (`Catalog.lint`); `stepwise catalog
lint` prints them, as errors with `--strict`.

The rule ids are ansible-lint's, so a finding here is the one `ansible-lint --profile
production` reports on the exported plays (docs/catalog.md lists them).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

from stepwise.errors import Problem
from stepwise.model.vocab import Section

#: the top-level keys of a service file that hold tasks (lists, or mappings of step -> list)
TASK_KEYS = frozenset({*(str(s) for s in Section), "schema"})
COMMAND_MODULES = ("ansible.builtin.command", "ansible.builtin.shell", "command", "shell")
#: programs with an Ansible module (ansible-lint's command-instead-of-module list, but for
#: those whose module cannot do a catalog's job: `NO_MODULE_HERE`)
MODULE_FOR = {
    "apt-get": "ansible.builtin.apt",
    "chkconfig": "ansible.builtin.service",
    "curl": "ansible.builtin.get_url or ansible.builtin.uri",
    "git": "ansible.builtin.git",
    "mktemp": "ansible.builtin.tempfile",
    "mount": "ansible.posix.mount",
    "patch": "ansible.posix.patch",
    "rpm": "ansible.builtin.rpm_key or ansible.builtin.dnf",
    "service": "ansible.builtin.service",
    "systemctl": "ansible.builtin.systemd_service",
    "tar": "ansible.builtin.unarchive",
    "unzip": "ansible.builtin.unarchive",
    "wget": "ansible.builtin.get_url",
    "yum": "ansible.builtin.dnf",
}
#: programs ansible-lint names a module for that cannot do the catalog's job, and why: the
#: exported task carries ansible-lint's noqa comment for them (docs/catalog.md, "Lint")
NO_MODULE_HERE = {
    "rsync": "ansible.posix.synchronize copies between the controller and a node, not from "
    "one node to another, and its collection is not part of ansible-core",
    "sed": "a catalog's tasks are node commands (docs/node-commands.md): one catalog serves "
    "real nodes and lab nodes, whose files only the node's own commands find",
}
#: what a program may be asked for without the module (queries the module does not make)
QUERIES = {
    "systemctl": {
        "--version",
        "get-default",
        "kill",
        "set-default",
        "set-property",
        "set-environment",
        "unset-environment",
        "show-environment",
        "status",
        "reset-failed",
    },
    "git": {"branch", "log", "lfs", "rev-parse", "clean"},
    "yum": {"clean", "history", "info"},
    "rpm": {"--nodeps"},
}
#: what only a shell understands (ansible-lint's command-instead-of-shell looks for these)
_SHELL_ONLY = re.compile(r"[&|<>;$\n*\[\]{}?`]")
_JINJA = re.compile(r"{{.*?}}|{%.*?%}", re.S)


def lint_service_file(doc: Any, source: str) -> list[Problem]:
    """The findings on every task of one parsed service file (a YMap from `load_yaml`)."""
    if not isinstance(doc, dict):
        return []
    problems: list[Problem] = []
    for where, task, line in _tasks(doc, []):
        problems.extend(
            Problem(message, file=source, line=line, field=where, hint=hint)
            for message, hint in check_task(task)
        )
    return problems


def _tasks(node: Any, path: list[str]) -> Iterator[tuple[str, dict, int | None]]:
    """(field path, task, line) of every task under the task-holding keys (blocks included)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if path or str(key) in TASK_KEYS:
                yield from _tasks(value, [*path, str(key)])
        return
    if not isinstance(node, list) or not path:
        return
    lines = getattr(node, "lines", [])
    for i, item in enumerate(node):
        if not isinstance(item, dict):
            continue
        where = f"{'.'.join(path)}[{i}]"
        yield where, item, (lines[i] if i < len(lines) else None)
        for inner in ("block", "rescue", "always"):
            if isinstance(item.get(inner), list):
                yield from _tasks(item[inner], [where, inner])


def check_task(task: dict) -> list[tuple[str, str]]:
    """(message, hint) for each rule a task breaks."""
    found: list[tuple[str, str]] = []
    name = task.get("name")
    if not isinstance(name, str) or not name.strip():
        found.append(("name[missing]: the task has no name", "name what it does, on which service"))
    elif name[:1].islower():
        found.append(
            ("name[casing]: the task's name does not start with a capital letter", "capitalise it")
        )
    if "block" in task:
        return found
    module = next((m for m in COMMAND_MODULES if m in task), None)
    if module is None:
        return found
    found.extend(_command_findings(task, module))
    return found


def _command_text(args: Any) -> str:
    """The command line of a command/shell task (free form, `cmd:` or `argv:`)."""
    if isinstance(args, dict):
        if isinstance(args.get("argv"), list):
            return " ".join(shlex.quote(str(a)) for a in args["argv"])
        return str(args.get("cmd", ""))
    return str(args or "")


def _command_findings(task: dict, module: str) -> list[tuple[str, str]]:
    args = task[module]
    text = _command_text(args)
    shell = module.endswith("shell")
    found: list[tuple[str, str]] = []
    changes_known = "changed_when" in task or (
        isinstance(args, dict) and ("creates" in args or "removes" in args)
    )
    if not changes_known:
        found.append(
            (
                "no-changed-when: the command does not say when it changed something",
                "add changed_when: true (it changes the node), false (a query) or a condition",
            )
        )
    bare = _JINJA.sub("", text)
    if shell and not _SHELL_ONLY.search(bare):
        found.append(
            (
                "command-instead-of-shell: shell is used where nothing needs a shell",
                "use ansible.builtin.command",
            )
        )
    if shell and "|" in bare.replace("||", "") and "pipefail" not in text:
        found.append(
            (
                "risky-shell-pipe: a pipe without `set -o pipefail` hides a failing command",
                "start the script with `set -o pipefail` and set executable: /bin/bash",
            )
        )
    program, option = _program(text)
    if program in MODULE_FOR and option not in QUERIES.get(program, ()):
        found.append(
            (
                f"command-instead-of-module: {program} is used where a module exists",
                f"use {MODULE_FOR[program]}",
            )
        )
    return found


def _program(text: str) -> tuple[str, str]:
    """The program a command line starts with (its base name) and its first argument."""
    try:
        words = shlex.split(text.strip().splitlines()[0]) if text.strip() else []
    except ValueError:
        words = text.split()
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]  # environment assignments before the program
    if not words:
        return "", ""
    return words[0].rsplit("/", 1)[-1], (words[1] if len(words) > 1 else "")
