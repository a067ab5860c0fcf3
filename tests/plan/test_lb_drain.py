"""No service behind a load balancer stops while still in it (issue 36 item 2): in every plan
of every workflow and style, a unit that takes down a service with a `frontend:` on a node
comes after a `leave` of that service on that node, and a unit that starts it again is
followed by its `rejoin` there."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import Deployment, load_deployment, load_facts
from stepwise.model.facts import NO_FACTS, Facts
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan
from stepwise.plan.options import command_selection
from stepwise.plan.progress import implicit_clears, implicit_marks
from stepwise.plan.units import Plan, Unit
from stepwise.verify import verify_plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
FACTS = ROOT / "examples" / "facts"
#: units that take the services of their nodes down without a stop task of their own
DOWN = (Step.STOP, Step.REBOOT, Step.SYSTEM_UPGRADE_PREPARE, Step.SYSTEM_UPGRADE_RUN)


def _clouds(tmp: Path) -> Iterator[tuple[str, Deployment]]:
    """Every example, and the containers example in the Kolla style too."""
    for path in EXAMPLES:
        yield path.stem, load_deployment(path)
    text = (ROOT / "examples" / "tripleo-containers.yaml").read_text()
    kolla = tmp / "kolla-containers.yaml"
    kolla.write_text(text.replace("\nstyle: tripleo\n", "\nstyle: kolla\n"))
    yield "kolla-containers", load_deployment(kolla)


def _plans(dep: Deployment) -> Iterator[tuple[str, Plan, Facts]]:
    """The plans of every workflow the cloud has, on a fresh cloud and with the examples'
    facts where they apply (a refused plan has no unit to check)."""
    if any(r.is_management for r in dep.roles):
        workflows = [Workflow.UNDERCLOUD_UPGRADE]
    else:
        workflows = [Workflow.UPDATE, Workflow.UPGRADE, Workflow.SYSTEM_UPGRADE]
    for wf in workflows:
        facts: list[Facts] = [NO_FACTS]
        for name in ("minor-update", "major-upgrade", "os-upgrade"):
            try:
                facts.append(load_facts(FACTS / f"{name}.yaml", dep))
            except InputError:
                pass  # the facts of another example's nodes
        for fx in facts:
            try:
                plan = make_plan(wf, dep, fx, preview=True)
            except (InputError, UnsafePlanError):
                continue
            yield f"{wf} {fx.source or 'fresh'}", plan, fx


def _before(units: tuple[Unit, ...]) -> dict[str, set[str]]:
    """unit id -> the ids of every unit it waits for, directly or not."""
    out: dict[str, set[str]] = {}
    for u in units:  # topological order: what a unit waits for is already known
        out[u.id] = set().union(*({a} | out.get(a, set()) for a in u.after)) if u.after else set()
    return out


def _taken_down(u: Unit, node: str) -> set[str]:
    """The services `u` takes down on `node`: those it stops there, and whatever it says stops
    serving when it begins (a leave takes its services out, it does not stop them)."""
    if u.step is Step.LEAVE:
        return set()
    out = {s for s, ns in u.stops.items() if node in ns}
    if u.step in DOWN:
        out |= set(u.services_on(node))
    return out


def _stopped_earlier(dep: Deployment, facts: Facts) -> set[str]:
    """The nodes whose services an earlier command stopped (the OS upgrade's step 5 on a
    role's old-OS nodes, after their leave): their services stop serving no more."""
    return {
        n.name
        for r in dep.roles
        if f"os:stopped_old@{r.name}" in facts.progress
        for n in r.nodes
        if f"os:first@{r.name}={n.name}" not in facts.progress
    }


def lb_violations(plan: Plan, dep: Deployment, facts: Facts = NO_FACTS) -> list[str]:
    """Every service with a frontend a unit stops before its leave or starts without a later
    rejoin, on the node where it does."""
    fronted = {s.name for s in dep.catalog if s.frontend}
    down = _stopped_earlier(dep, facts)
    before = _before(plan.units)
    by_id = {u.id: u for u in plan.units}
    bad = []
    for u in plan.units:
        for n in u.nodes:
            for s in sorted(_taken_down(u, n) & fronted if n not in down else ()):
                left = any(
                    by_id[b].step is Step.LEAVE and s in by_id[b].services_on(n)
                    for b in before[u.id]
                )
                if not left:
                    bad.append(f"{u.id} ({u.step}) takes {s} down on {n} before its leave")
            if u.step is not Step.START:
                continue
            for s in sorted(set(u.services_on(n)) & fronted):
                back = any(
                    v.step is Step.REJOIN and s in v.services_on(n) and u.id in before[v.id]
                    for v in plan.units
                )
                if not back:
                    bad.append(f"{u.id} starts {s} on {n} with no rejoin after it")
    return bad


def test_every_api_behind_a_vip_leaves_before_it_stops_and_rejoins_after_it_starts(
    tmp_path: Path,
):
    checked: dict[str, int] = {}
    for name, dep in _clouds(tmp_path):
        fronted = {s for s in dep.instances if dep.catalog[s].frontend}
        for label, plan, fx in _plans(dep):
            bad = lb_violations(plan, dep, fx)
            assert not bad, (name, label, bad[:5])
            stops = [u for u in plan.units for n in u.nodes if _taken_down(u, n) & fronted]
            checked[name] = checked.get(name, 0) + len(stops)
    # every cloud with an API behind its VIPs had plans that stop them
    assert all(checked[name] > 0 for name in checked if name != "undercloud"), checked
    assert {"classic", "tripleo-containers", "kolla-containers", "openstack"} <= set(checked)


@pytest.mark.parametrize("style", ["packages", "tripleo", "kolla"])
def test_the_generic_drain_is_in_every_style(style: str, tmp_path: Path):
    """nova_api had no leave of its own: its frontend alone brings it, on a host or in a
    container."""
    text = (ROOT / "examples" / "tripleo-containers.yaml").read_text()
    path = tmp_path / "cloud.yaml"
    path.write_text(text.replace("\nstyle: tripleo\n", f"\nstyle: {style}\n"))
    dep = load_deployment(path)
    assert not dep.catalog["nova_api"].steps(Workflow.UPDATE.task_section).get(Step.LEAVE)
    plan = make_plan(Workflow.UPDATE, dep)
    left = {
        n
        for u in plan.units
        if u.step is Step.LEAVE
        for n in u.nodes
        if "nova_api" in u.services_on(n)
    }
    back = {
        n
        for u in plan.units
        if u.step is Step.REJOIN
        for n in u.nodes
        if "nova_api" in u.services_on(n)
    }
    assert left == back == {n.name for n in dep.instances["nova_api"]}


def test_a_leave_takes_its_apis_out_of_service_when_it_begins(tmp_path: Path):
    """An API that leaves the load balancer serves no more through its VIP: the leave says so
    (its `stops`), so a downtime window opens with the leave that takes the last instance out,
    not with the stop after it (stop 41's CI: the OS upgrade's step 5 drained keystone's last
    two servers, the VIP answered 503 for 4 s before the announced window began)."""
    checked = 0
    for name, dep in _clouds(tmp_path):
        fronted = {s.name for s in dep.catalog if s.frontend}
        for label, plan, _fx in _plans(dep):
            for u in plan.units:
                if u.step is not Step.LEAVE:
                    continue
                for n in u.nodes:
                    for s in set(u.services_on(n)) & fronted:
                        assert n in u.stops.get(s, ()), (name, label, u.id, u.why, s, n)
                        checked += 1
    assert checked > 0


def test_the_os_upgrades_step_5_window_opens_with_the_leave():
    dep = load_deployment(ROOT / "tests" / "run" / "fixtures" / "composed-mini.yaml")
    first = "controller-openstack-0,database-0,messaging-0"
    progress: set[str] = set()
    for command, kw in (
        ("upgrade prepare", {}),
        ("upgrade run", {"tags": "system_upgrade_prepare", "limit": first}),
        ("external-upgrade run", {"tags": "system_upgrade_prepare", "limit": first}),
        ("upgrade run", {"tags": "system_upgrade_run", "limit": first}),
        (
            "external-upgrade run",
            {"tags": "system_upgrade_transfer_data", "limit": "ControllerOpenstack,Database"},
        ),
    ):
        # each command planned from the milestones the ones before reached, as the engine
        # records them
        wf, sel = command_selection(command, progress=progress, **kw)
        plan = verify_plan(make_plan(wf, dep, NO_FACTS.with_progress(progress), selection=sel), dep)
        for u in plan.units:
            for prefix in implicit_clears(u):
                progress = {m for m in progress if not m.startswith(prefix)}
            progress |= set(u.marks) | set(implicit_marks(u))
    (leave,) = [u for u in plan.units if u.step is Step.LEAVE]
    assert {"keystone", "nova_api"} <= set(leave.services)
    keystone = [w for w in plan.windows if w.service == "keystone"]
    assert keystone and keystone[0].start_s == leave.start_s, (keystone, leave.start_s)
