"""Node commands that edit a node's files: the real tool, with every absolute file operand
mapped into the node's root (a catalog task names /var/lib/..., the lab node keeps it in its
own directory)."""

from __future__ import annotations

import shutil
import subprocess

from stepwise.lab.nodecmd_base import command, err
from stepwise.lab.nodes import Lab

#: sed's options that take the next argument: a script (-e) or a script file (-f)
_WITH_ARG = {"-e": False, "-f": True, "--expression": False, "--file": True}


@command("sed")
def sed(lab: Lab, node: str, args: list[str]) -> int:
    """GNU sed on the node's files (`sed -i 's/a/b/' /var/lib/mysql/grastate.dat`)."""
    from stepwise.lab import mariadb

    real = shutil.which("sed", path=mariadb.SYSTEM_PATH)
    if real is None:
        return err("sed: command not found")
    mapped: list[str] = []
    script_given = False
    i = 0
    while i < len(args):
        a = args[i]
        if a in _WITH_ARG and i + 1 < len(args):
            script = args[i + 1]
            mapped += [a, str(lab.node_path(node, script)) if _WITH_ARG[a] else script]
            script_given, i = True, i + 2
            continue
        if a.startswith("-") and a != "-":
            script_given = script_given or a.startswith(("--expression=", "--file="))
            mapped.append(a)
        elif not script_given:
            mapped.append(a)  # the script
            script_given = True
        else:
            mapped.append(str(lab.node_path(node, a)))
        i += 1
    return subprocess.run([real, *mapped], check=False).returncode


@command("rm")
def rm(lab: Lab, node: str, args: list[str]) -> int:
    """GNU rm on the node's files (`rm -rf /var/lib/rabbitmq/mnesia`: the RabbitMQ database a
    new-OS member starts over without). Only absolute operands strictly inside the node's root:
    a relative one would name a file of whatever directory the command ran in, and `/` or a
    path climbing out with `..` would reach past the node."""
    from stepwise.lab import mariadb

    real = shutil.which("rm", path=mariadb.SYSTEM_PATH)
    if real is None:
        return err("rm: command not found")
    root = lab.node_root(node).resolve()
    options = [a for a in args if a.startswith("-") and a != "-"]
    operands = [a for a in args if a not in options]
    if not operands:
        return err("rm: missing operand")
    mapped: list[str] = []
    for a in operands:
        path = lab.node_path(node, a)
        if not a.startswith("/") or root not in path.resolve().parents:
            return err(f"rm: refusing to remove '{a}' (only a path under / of this node)")
        mapped.append(str(path))  # unresolved: a link itself, as rm removes it
    return subprocess.run([real, *options, "--", *mapped], check=False).returncode
