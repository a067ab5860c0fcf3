"""Preflight: read-only checks per node that tell, before a window, what would make a run fail
in the middle of it (a full disk, unreachable repositories, a leapp inhibitor, a cluster that
is not whole, a service's own upgrade check, a node left prepared or half-done).

Each check is a row of `NODE_CHECKS` (the model is `verify/invariants.py`): a name, where it
applies, the node command it asks and the judge that reads the answer into a `Finding` with a
verdict and what to do. Every node command of every node is asked by one Ansible play
(`preflight_play.py`), all nodes at once; the store-side checks (`store_findings`) read what
the runs and milestones recorded. Nothing changes on a node.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model import Deployment
from stepwise.model.choices import UpgradeMode
from stepwise.model.vocab import Step, UnitState, Verdict
from stepwise.plan.table import WORKFLOW_TABLE
from stepwise.plan.units import Plan

#: the -e variable that overrides the free space a node needs on /
MIN_FREE_VAR = "stepwise_preflight_min_free_mib"
#: free MiB on / a node needs by default: an OS upgrade downloads a whole OS, an update packages
MIN_FREE_OS_MIB, MIN_FREE_MIB = 2048, 500
#: where leapp writes the report of `leapp preupgrade` (under the node's root)
LEAPP_REPORT = "/var/log/leapp/leapp-report.json"
#: the steps that prepare a node's OS upgrade (leapp's preupgrade applies to their nodes)
OS_PREPARE_STEPS = frozenset({Step.SYSTEM_UPGRADE_PREPARE, Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE})


@dataclass(frozen=True)
class Finding:
    """What one check found on one node, and what to do about it ('' when it passed)."""

    node: str
    check: str
    verdict: Verdict
    detail: str
    todo: str = ""

    def to_json(self) -> dict[str, str]:
        """The finding as `preflight --json` prints it."""
        return {
            "node": self.node,
            "check": self.check,
            "verdict": str(self.verdict),
            "detail": self.detail,
            "todo": self.todo,
        }


@dataclass(frozen=True)
class Answer:
    """A node command's exit code and output, as the preflight play reported it."""

    rc: int
    stdout: str = ""
    stderr: str = ""

    @property
    def missing(self) -> bool:
        """The command does not exist on the node (the shell's 127)."""
        return self.rc == 127


@dataclass(frozen=True)
class Context:
    """What the checks of one plan need: the deployment, the plan (its workflow and nodes) and
    the operator's -e variables."""

    deployment: Deployment
    plan: Plan
    variables: Mapping[str, Any] = field(default_factory=dict)
    nodes: tuple[str, ...] = ()
    #: nodes the run being continued left mid-visit: their clusters were left on purpose (the
    #: continued run's rejoin and verify check them), so the cluster checks skip them
    mid_visit: frozenset[str] = frozenset()

    @property
    def replaces_os(self) -> bool:
        return WORKFLOW_TABLE[self.plan.workflow].replaces_os

    def min_free_mib(self) -> int:
        """The free space a node needs on /: -e stepwise_preflight_min_free_mib, else the
        workflow's default."""
        given = self.variables.get(MIN_FREE_VAR)
        if given is None:
            return MIN_FREE_OS_MIB if self.replaces_os else MIN_FREE_MIB
        try:
            value = int(str(given))
        except ValueError:
            value = -1
        if value < 0:
            raise InputError(
                Problem(
                    f"{MIN_FREE_VAR} must be a whole number of MiB, not {str(given)[:40]!r}",
                    field=f"-e {MIN_FREE_VAR}",
                    hint=f"e.g. -e {MIN_FREE_VAR}=1024",
                )
            )
        return value

    def os_prepared_here(self, node: str) -> bool:
        """The plan prepares this node's OS upgrade in place (leapp)."""
        if self.plan.params.get("system_upgrade_mode") == UpgradeMode.REPROVISION:
            return False
        return any(u.step in OS_PREPARE_STEPS and node in u.nodes for u in self.plan.units)

    def runs_cluster(self, node: str, kinds: Sequence[str]) -> bool:
        """One of the node's services is a member of a cluster of these kinds (and the node
        is not one a continued run left mid-visit)."""
        if node in self.mid_visit:
            return False
        cat = self.deployment.catalog
        return any(cat[s].cluster in kinds for s in self.deployment.services_on(node))

    def cluster_size(self, kinds: Sequence[str]) -> int:
        """How many members the deployment's cluster of these kinds has."""
        cat = self.deployment.catalog
        return sum(
            1
            for n in self.deployment.nodes
            if any(cat[s].cluster in kinds for s in self.deployment.services_on(n.name))
        )


Judge = Callable[[Context, str, Answer], Finding]


@dataclass(frozen=True)
class NodeCheck:
    """One preflight check: its name, where it applies, the read-only command it asks the
    node (bash; `$STEPWISE_ROOT` is the node's root, '' on a real node) and its judge."""

    name: str
    applies: Callable[[Context, str], bool]
    command: str
    judge: Judge


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else "..." + text[-limit:]


def judge_disk(ctx: Context, node: str, a: Answer) -> Finding:
    """`df -Pk /`: the free space on / against what the workflow needs."""
    need = ctx.min_free_mib()
    lines = [line.split() for line in a.stdout.splitlines() if line.strip()]
    if a.rc != 0 or len(lines) < 2 or len(lines[-1]) < 4 or not lines[-1][3].isdigit():
        return Finding(
            node,
            "disk",
            Verdict.FAIL,
            f"df could not tell the free space on /: {_tail(a.stderr or a.stdout) or a.rc}",
            "check the node's root filesystem by hand (df -h /)",
        )
    free = int(lines[-1][3]) // 1024
    if free < need:
        return Finding(
            node,
            "disk",
            Verdict.FAIL,
            f"{free} MiB free on /, {need} MiB needed",
            f"free at least {need - free} MiB on / of {node} (old kernels, dnf clean all, "
            f"logs), or set -e {MIN_FREE_VAR}=N if less is enough",
        )
    return Finding(node, "disk", Verdict.PASS, f"{free} MiB free on / ({need} MiB needed)")


def judge_repos(_ctx: Context, node: str, a: Answer) -> Finding:
    """`dnf repolist --enabled`: every enabled repository answered (dnf fails otherwise)."""
    if a.missing:
        return Finding(node, "repositories", Verdict.SKIP, "no dnf on this node")
    repos = [
        line.split()[0]
        for line in a.stdout.splitlines()
        if line.strip() and not line.lower().startswith("repo id")
    ]
    if a.rc != 0:
        return Finding(
            node,
            "repositories",
            Verdict.FAIL,
            f"dnf could not reach the repositories: {_tail(a.stderr or a.stdout)}",
            f"fix the repository configuration or the network of {node} (dnf repolist -v)",
        )
    if not repos:
        return Finding(
            node,
            "repositories",
            Verdict.FAIL,
            "no repository is enabled",
            f"enable the release's repositories on {node} (tripleo-repos)",
        )
    return Finding(node, "repositories", Verdict.PASS, f"{len(repos)} enabled: {', '.join(repos)}")


def leapp_inhibitors(report: Any) -> list[dict[str, Any]]:
    """The entries of a leapp report that inhibit the upgrade (`flags` in older leapp,
    `groups` in newer)."""
    entries = report.get("entries") if isinstance(report, dict) else None
    out = []
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict):
            continue
        tags = list(e.get("flags") or []) + list(e.get("groups") or [])
        if "inhibitor" in tags:
            out.append(e)
    return out


def _remediation(entry: Mapping[str, Any]) -> str:
    detail = entry.get("detail") if isinstance(entry.get("detail"), dict) else {}
    hints = [
        str(r.get("context"))
        for r in (detail or {}).get("remediations") or []
        if isinstance(r, dict) and r.get("context")
    ]
    return "; ".join(hints)


def judge_leapp(_ctx: Context, node: str, a: Answer) -> Finding:
    """`leapp preupgrade` and its JSON report: any inhibitor fails, named with its remedy."""
    try:
        report = json.loads(a.stdout)
    except ValueError:
        return Finding(
            node,
            "leapp",
            Verdict.FAIL,
            f"leapp preupgrade wrote no report: {_tail(a.stderr) or 'no output'}",
            f"run `leapp preupgrade` on {node} and read /var/log/leapp/leapp-report.txt",
        )
    inhibitors = leapp_inhibitors(report)
    if not inhibitors:
        return Finding(node, "leapp", Verdict.PASS, "no inhibitor in the pre-upgrade report")
    titles = "; ".join(str(e.get("title") or e.get("summary") or "?") for e in inhibitors)
    hints = "; ".join(h for h in (_remediation(e) for e in inhibitors) if h)
    return Finding(
        node,
        "leapp",
        Verdict.FAIL,
        f"{len(inhibitors)} inhibitor(s): {_tail(titles)}",
        (hints + "; " if hints else "")
        + f"see /var/log/leapp/leapp-report.txt on {node}, then run preflight again",
    )


def _status_values(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out[parts[0].lower()] = parts[1]
    return out


def judge_galera(ctx: Context, node: str, a: Answer) -> Finding:
    """wsrep_cluster_status Primary, and (outside an OS upgrade, where members leave on
    purpose) wsrep_cluster_size the deployment's member count."""
    values = _status_values(a.stdout)
    status, size = values.get("wsrep_cluster_status"), values.get("wsrep_cluster_size")
    if a.rc != 0 or status is None:
        if ctx.replaces_os:
            return Finding(node, "galera", Verdict.SKIP, "the member does not answer here")
        return Finding(
            node,
            "galera",
            Verdict.FAIL,
            f"the Galera member does not answer: {_tail(a.stderr or a.stdout)}",
            f"start galera on {node} and wait until it is Synced",
        )
    if status != "Primary":
        return Finding(
            node,
            "galera",
            Verdict.FAIL,
            f"wsrep_cluster_status is {status}, not Primary",
            "bring the cluster back to a primary component (every member of the last primary "
            "component back, or pc.bootstrap=YES on the most advanced one) before the window",
        )
    expected = ctx.cluster_size(("galera",))
    if not ctx.replaces_os and size is not None and size.isdigit() and int(size) < expected:
        return Finding(
            node,
            "galera",
            Verdict.FAIL,
            f"wsrep_cluster_size is {size} of {expected} members",
            "start the missing members and wait until they are Synced",
        )
    return Finding(node, "galera", Verdict.PASS, f"Primary, {size} member(s)")


def judge_pacemaker(ctx: Context, node: str, a: Answer) -> Finding:
    """`pcs status`: the cluster runs here with quorum and shows no failed action."""
    if a.rc != 0 and ctx.replaces_os:
        return Finding(node, "pacemaker", Verdict.SKIP, "the cluster does not run here")
    failed = re.search(r"Failed (Resource )?Actions", a.stdout)
    if a.rc != 0 or failed:
        return Finding(
            node,
            "pacemaker",
            Verdict.FAIL,
            "failed actions in `pcs status`"
            if failed
            else f"pcs status failed: {_tail(a.stderr or a.stdout)}",
            "clear them (pcs resource cleanup) once their cause is fixed"
            if failed
            else f"start the cluster on {node} (pcs cluster start) and check its quorum",
        )
    return Finding(node, "pacemaker", Verdict.PASS, "running, no failed action")


def judge_ceph(_ctx: Context, node: str, a: Answer) -> Finding:
    """`ceph health`: HEALTH_OK passes, HEALTH_WARN warns, anything else fails."""
    text = _tail(a.stdout or a.stderr)
    if a.rc == 0 and text.startswith("HEALTH_OK"):
        return Finding(node, "ceph", Verdict.PASS, "HEALTH_OK")
    if a.rc == 0 and text.startswith("HEALTH_WARN"):
        return Finding(node, "ceph", Verdict.WARN, text, "read `ceph health detail`")
    return Finding(
        node,
        "ceph",
        Verdict.FAIL,
        text or f"ceph health failed (exit {a.rc})",
        "bring the Ceph cluster to HEALTH_OK (ceph health detail) before the window",
    )


def judge_status_check(name: str) -> Judge:
    """A service's `*-status upgrade check`: 0 passes, 1 warns, anything else fails."""

    def judge(_ctx: Context, node: str, a: Answer) -> Finding:
        failures = [line for line in a.stdout.splitlines() if "Failure" in line]
        if a.missing:  # the service is not installed here (yet: an OS upgrade's new node)
            return Finding(node, name, Verdict.SKIP, "not installed on this node")
        if a.rc == 0 and a.stdout.strip() == NOT_RUNNING:
            return Finding(node, name, Verdict.SKIP, "the service is not running on this node")
        if a.rc == 0:
            return Finding(node, name, Verdict.PASS, "upgrade checks passed")
        if a.rc == 1:
            return Finding(node, name, Verdict.WARN, "warnings", f"read `{name}` on {node}")
        return Finding(
            node,
            name,
            Verdict.FAIL,
            _tail("; ".join(failures) or a.stderr or a.stdout) or f"exit {a.rc}",
            "fix what the check reports (its table names each failed check), then run "
            "preflight again",
        )

    return judge


def _galera_query(until: str) -> str:
    """The member's state, asked again each second for ten seconds until the answer matches
    the shell pattern `until`."""
    return (
        'for _ in 1 2 3 4 5 6 7 8 9 10; do out=$(mariadb -N -B -e "SHOW GLOBAL STATUS WHERE '
        "Variable_name IN ('wsrep_cluster_status', 'wsrep_cluster_size', "
        '\'wsrep_local_state_comment\')" 2>&1); rc=$?; case "$out" in '
        + until
        + ') break;; esac; sleep 1; done; echo "$out"; exit $rc'
    )


#: a member still joining (just restarted: IST or SST) is given ten seconds to be Synced
GALERA_QUERY = _galera_query("*Synced*")
#: in an OS upgrade members are down on purpose (a member that does not answer is skipped):
#: one whose server is not running at all is not waited for (ten seconds per command before)
GALERA_QUERY_OS = _galera_query('*Synced*|*"Can\'t connect"*')
#: the report of a fresh `leapp preupgrade` on stdout (leapp's own output on stderr)
LEAPP_COMMAND = f'leapp preupgrade >&2; cat "$STEPWISE_ROOT{LEAPP_REPORT}"'

#: The checks every node of a plan is asked, in the order they are shown.
NODE_CHECKS: tuple[NodeCheck, ...] = (
    NodeCheck("disk", lambda _c, _n: True, "df -Pk /", judge_disk),
    NodeCheck("repositories", lambda _c, _n: True, "dnf -q repolist --enabled", judge_repos),
    NodeCheck("leapp", Context.os_prepared_here, LEAPP_COMMAND, judge_leapp),
    NodeCheck(
        "galera",
        lambda c, n: not c.replaces_os and c.runs_cluster(n, ("galera",)),
        GALERA_QUERY,
        judge_galera,
    ),
    NodeCheck(
        "galera",
        lambda c, n: c.replaces_os and c.runs_cluster(n, ("galera",)),
        GALERA_QUERY_OS,
        judge_galera,
    ),
    NodeCheck(
        "pacemaker",
        lambda c, n: c.runs_cluster(n, ("pacemaker", "corosync")),
        "pcs status",
        judge_pacemaker,
    ),
    NodeCheck("ceph", lambda c, n: c.runs_cluster(n, ("ceph-mon",)), "ceph health", judge_ceph),
)


def mid_visit(plan: Plan, states: Mapping[str, UnitState]) -> frozenset[str]:
    """The nodes a continued run left in the middle of a visit (a unit failed or cut there):
    their services may be stopped on purpose until the run continues."""
    cut = {UnitState.FAILED, UnitState.INTERRUPTED, UnitState.RUNNING}
    return frozenset(n for u in plan.units if states.get(u.id) in cut for n in u.nodes)


def checks_for(ctx: Context, node: str) -> list[NodeCheck]:
    """The checks that apply to one node: the table's, then each of its services' catalog
    `preflight` commands."""
    out = [c for c in NODE_CHECKS if c.applies(ctx, node)]
    for s in ctx.deployment.services_on(node):
        svc = ctx.deployment.catalog[s]
        for name, command in svc.preflight:
            asked = _where_running(svc.unit, command)
            out.append(NodeCheck(name, lambda _c, _n: True, asked, judge_status_check(name)))
    return out


#: what a service's own check prints instead of running where the service is stopped
NOT_RUNNING = "STEPWISE_NOT_RUNNING"


def _where_running(unit: str, command: str) -> str:
    """A service's own check asks its running code (its database, its configuration): where
    the service is stopped on purpose (an OS upgrade's node between two seed steps) there is
    nothing to ask, and the steps that start it check it (verify, health)."""
    return (
        f"if ! systemctl is-active {shlex.quote(unit)} >/dev/null 2>&1; "
        f"then echo {NOT_RUNNING}; exit 0; fi\n{command}"
    )
