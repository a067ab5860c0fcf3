"""Run the preflight: one generated read-only play asks every node its checks' commands (all
nodes in parallel, one ansible-playbook start), the answers are judged in Python
(`preflight.py`), and what the store knows (nodes prepared for the OS upgrade, runs that
stopped half-way) is added."""

from __future__ import annotations

import base64
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stepwise.model.facts import Facts
from stepwise.model.vocab import RunState, UnitState, Verdict
from stepwise.plan.progress import prepared_not_upgraded
from stepwise.run.ansible_files import unsafe
from stepwise.run.discover import run_read_only_play
from stepwise.run.inventory import Connector, inventory
from stepwise.run.node_work import NODE_ROOT
from stepwise.run.preflight import Answer, Context, Finding, NodeCheck, checks_for
from stepwise.run.store.store import Store

#: the host variable that carries each node's checks into the play
CHECKS_VAR = "stepwise_preflight_checks"


@dataclass(frozen=True)
class Report:
    """Every finding of a preflight, node by node in the table's order."""

    findings: tuple[Finding, ...]

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict is Verdict.FAIL]

    @property
    def ok(self) -> bool:
        return not self.failed

    def to_json(self) -> dict[str, Any]:
        """`preflight --json`: whether it passed, and every finding."""
        return {
            "ok": self.ok,
            "failed": len(self.failed),
            "findings": [f.to_json() for f in self.findings],
        }


def play(nodes: Sequence[str]) -> dict[str, Any]:
    """The read-only play: one shell task per node runs all its checks (one module run per
    node, not one per check: a run command's preflight cost seconds per command on a lab of
    13 nodes), nothing fails the play (the answers are judged afterwards) and nothing is
    reported as changed."""
    return {
        "name": "stepwise preflight",
        "hosts": ",".join(nodes),
        "gather_facts": False,
        "tasks": [
            {
                "name": "preflight",
                "ansible.builtin.shell": {
                    "cmd": "{{ " + CHECKS_VAR + " }}",
                    "executable": "/bin/bash",
                },
                "environment": {"STEPWISE_ROOT": NODE_ROOT},
                "changed_when": False,
                "failed_when": False,
            }
        ],
    }


#: how the script frames each check's answer: `@@stepwise-check ID RC STDOUT STDERR` with the
#: outputs in base64 (any byte a command prints stays inside its frame)
FRAME = "@@stepwise-check"


def checks_script(checks: Sequence[NodeCheck]) -> str:
    """One node's checks as one bash script: each command in its own bash (its `exit` ends
    only itself), its exit code and both outputs framed on one line."""
    lines = [
        "_o=$(mktemp) _e=$(mktemp)",
        'trap \'rm -f "$_o" "$_e"\' EXIT',
    ]
    for i, c in enumerate(checks):
        lines.append(
            f'bash -c {shlex.quote(c.command)} >"$_o" 2>"$_e" </dev/null; _rc=$?; '
            f"printf '%s %s %s %s %s\\n' {FRAME} {i} \"$_rc\" "
            '"$(base64 -w0 <"$_o")" "$(base64 -w0 <"$_e")"'
        )
    return "\n".join(lines) + "\n"


def parse_answers(stdout: str) -> dict[int, Answer]:
    """The framed answers of `checks_script`'s output, by check index."""
    out: dict[int, Answer] = {}
    for line in stdout.splitlines():
        parts = line.split(" ")
        if len(parts) != 5 or parts[0] != FRAME or not parts[1].isdigit():
            continue
        try:
            rc = int(parts[2])
            said, err = (base64.b64decode(x).decode(errors="replace") for x in parts[3:])
        except ValueError:
            continue
        out[int(parts[1])] = Answer(rc, said.rstrip("\n"), err.rstrip("\n"))
    return out


def preflight(
    ctx: Context,
    store: Store | None,
    cloud: str,
    *,
    connector: Connector | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    facts: Facts | None = None,
    run_key: str = "",
) -> Report:
    """Every check of every node of `ctx`: the nodes' answers, then the store's."""
    ctx.min_free_mib()  # a bad -e is refused before any node is asked
    checks = {n: checks_for(ctx, n) for n in ctx.nodes}
    answers, unreachable = ask_nodes(ctx, checks, connector, extra_vars)
    findings: list[Finding] = []
    for node in ctx.nodes:
        if node in unreachable:
            findings.append(
                Finding(
                    node,
                    "reachable",
                    Verdict.FAIL,
                    unreachable[node],
                    f"check that {node} is up and reachable (`--limit '!{node}'` leaves it out)",
                )
            )
            continue
        for i, check in enumerate(checks[node]):
            a = answers.get((node, i))
            findings.append(
                check.judge(ctx, node, a)
                if a is not None
                else Finding(node, check.name, Verdict.FAIL, "no answer", "run preflight again")
            )
    findings += store_findings(ctx, store, cloud, facts, run_key)
    return Report(tuple(findings))


def _host_checks(checks: Mapping[str, Sequence[NodeCheck]]) -> dict[str, Any]:
    # unsafe: the script is never templated (a check's braces stay braces)
    return {n: unsafe(checks_script(cs)) for n, cs in checks.items()}


def ask_nodes(
    ctx: Context,
    checks: Mapping[str, Sequence[NodeCheck]],
    connector: Connector | None,
    extra_vars: Mapping[str, Any] | None,
) -> tuple[dict[tuple[str, int], Answer], dict[str, str]]:
    """Run the play: each (node, check index)'s answer, and why the unreachable nodes did not
    answer."""
    answers: dict[tuple[str, int], Answer] = {}
    errors: dict[str, str] = {}
    nodes = [n for n in ctx.nodes if checks.get(n)]
    if not nodes:
        return answers, errors

    def on_event(ev: Mapping[str, Any]) -> bool:
        data = ev.get("event_data") or {}
        host, res = data.get("host"), data.get("res") or {}
        if ev.get("event") in ("runner_on_ok", "runner_on_failed") and "stdout" in res:
            for i, a in parse_answers(str(res.get("stdout") or "")).items():
                answers[(host, i)] = a
        elif ev.get("event") == "runner_on_unreachable":
            errors[host] = str(res.get("msg") or "unreachable").strip()
        elif ev.get("event") == "runner_on_failed" and res.get("msg"):
            # the task could not run there at all (no Python, no bash): no answer to judge
            errors[host] = str(res["msg"]).strip()
        return False

    inv = inventory(ctx.deployment, connector)
    per_host = _host_checks(checks)
    for role in inv["all"]["children"].values():
        for host, hv in role["hosts"].items():
            hv[CHECKS_VAR] = per_host.get(host, [])
    _run(nodes, inv, extra_vars, connector, on_event)
    return answers, errors


def _run(nodes, inv, extra_vars, connector, on_event) -> None:
    run_read_only_play(
        "preflight", play(nodes), inv, extra_vars, connector, max(1, len(nodes)), on_event
    )


def store_findings(
    ctx: Context, store: Store | None, cloud: str, facts: Facts | None, run_key: str
) -> list[Finding]:
    """What the store knows: nodes prepared for the OS upgrade that a plan other than the OS
    upgrade's would touch, and nodes an earlier run of another command left half-done."""
    out: list[Finding] = []
    if facts is not None and not ctx.replaces_os:
        for node in prepared_not_upgraded(facts):
            if node in ctx.nodes:
                out.append(
                    Finding(
                        node,
                        "os_upgrade_prepared",
                        Verdict.FAIL,
                        "prepared for the OS upgrade and not yet upgraded: a reboot starts it",
                        "finish its OS upgrade first (upgrade run --tags system_upgrade_run "
                        f"--limit {node}) or leave it out",
                    )
                )
    if store is not None:
        out += half_done(ctx, store, cloud, run_key)
    return out


def half_done(ctx: Context, store: Store, cloud: str, run_key: str) -> list[Finding]:
    """Nodes where the latest run of another command stopped (failed or interrupted) with a
    unit started and not finished, and no later finished run worked on them since."""
    runs = store.runs(cloud, 50)
    latest: dict[str, Any] = {}
    for r in runs:  # most recent first
        latest.setdefault(r.key, r)
    out: list[Finding] = []
    seen: set[str] = set()
    for r in latest.values():
        if r.key == run_key or r.status not in (RunState.FAILED, RunState.INTERRUPTED):
            continue
        later_done = {
            n
            for later in runs
            if later.id > r.id and later.status is RunState.DONE
            for u in later.plan.get("units", [])
            for n in u.get("nodes", [])
        }
        for u in store.units(r.id):
            state = UnitState(u.state)
            if state.finished or state is UnitState.PENDING:
                continue
            for node in u.nodes:
                if node in ctx.nodes and node not in later_done and node not in seen:
                    seen.add(node)
                    out.append(_left_half_done(node, r, u.unit_id, state))
    return out


def _left_half_done(node: str, run: Any, unit_id: str, state: UnitState) -> Finding:
    return Finding(
        node,
        "half_done",
        Verdict.FAIL,
        f"run {run.id} ({run.status}) left unit {unit_id} {state} on this node",
        f"continue that run first: `{run.command}` (or check the node by hand and start it "
        "over with --fresh)",
    )
