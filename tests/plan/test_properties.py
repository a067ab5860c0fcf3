"""Properties of plans for arbitrary catalogs and role layouts written to the contract."""

from __future__ import annotations

import json
import re
from collections import Counter

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model.catalog import allowance
from stepwise.plan import make_plan
from stepwise.verify import verify_plan
from tests.plan.cloud import catalog, cycles, deployment, facts, max_down, service, visits_per_node
from tests.shares import assert_share

PLANES = ("infra", "control", "data")
RANK = {"infra": 0, "control": 0, "data": 1}
RULES = st.one_of(
    st.none(),
    st.just({"quorum": "majority"}),
    st.integers(1, 2).map(lambda n: {"max_unavailable": n}),
    st.sampled_from(["25%", "50%", "10%"]).map(lambda p: {"max_unavailable": p}),
    st.integers(1, 2).map(lambda n: {"min_available": n}),
)


@st.composite
def clouds(draw):
    n = draw(st.integers(2, 7))
    specs = []
    for i in range(n):
        plane = draw(st.sampled_from(PLANES))
        # a dependency may only point at an earlier service of a plane upgraded no later
        deps = draw(st.lists(st.sampled_from(range(i)), unique=True, max_size=2)) if i else []
        deps = tuple(f"s{j}" for j in deps if RANK[specs[j]["plane"]] <= RANK[plane])
        specs.append(
            service(
                f"s{i}",
                plane,
                rolling=draw(st.booleans()),
                deps=deps,
                rule=draw(RULES),
                cluster=draw(st.sampled_from([None, None, "galera", "pacemaker"])),
                rpc=draw(st.sampled_from([None, "grp"])),
                migrate=draw(st.booleans()),
                leave=draw(st.booleans()),
                health=draw(st.booleans()),
                converge=draw(st.booleans()),
                durations={"packages": draw(st.sampled_from([30.0, 60.0, 90.0]))},
            )
        )
    cat = catalog(*specs)
    roles = []
    for r in range(draw(st.integers(1, 4))):
        services = draw(
            st.lists(
                st.sampled_from([s["name"] for s in specs]), unique=True, min_size=1, max_size=4
            )
        )
        roles.append(
            {
                "name": f"R{r}",
                "tags": ["controlplane"] if draw(st.booleans()) else [],
                "update_serial": draw(st.integers(1, 3)),
                "services": services,
                "nodes": {"count": draw(st.integers(1, 5)), "name": f"r{r}-{{index}}"},
            }
        )
    try:
        return deployment(cat, roles)
    except InputError:
        assume(False)  # e.g. a quorum rule on a service placed once: refused by validation


SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _batch_numbers_agree(plan):
    """'ROLE batch N of M' never numbers past its total, and a role's last batch gives the
    exact total (an estimate is marked ~)."""
    last: dict[tuple[str, str], tuple[int, str]] = {}
    for u in plan.units:
        for m in re.finditer(r"(\w+): (\S+) batch (\d+) of (~?)(\d+)", u.why):
            phase, role, n, approx, total = m.groups()
            assert int(n) <= int(total), u.why
            last[(phase, role)] = (int(n), f"{approx}{total}")
    for (phase, role), (n, total) in last.items():
        assert total == str(n), f"{phase} {role}: last batch {n} says of {total}"


def _check(dep, workflow):
    plan = make_plan(workflow, dep)
    again = make_plan(workflow, dep)
    assert json.dumps(plan.to_json()) == json.dumps(again.to_json()), "plans must be deterministic"
    seen: set[str] = set()
    for u in plan.units:
        assert set(u.after) <= seen, "units must come in a topological order (acyclic)"
        seen.add(u.id)
    verified = verify_plan(
        plan, dep
    )  # raises on any broken invariant, also with perturbed durations
    assert verified.lower_bound_s <= verified.duration_s + 1e-6
    # every instance is stopped and started exactly once
    expected = {(s, n.name) for s, nodes in dep.instances.items() for n in nodes}
    assert set(cycles(plan)) == expected
    assert set(cycles(plan).values()) == {(1, 1)}
    _batch_numbers_agree(plan)
    # availability rules at every moment of the simulated schedule (schema-sensitive
    # services in a major upgrade stop together: that is their announced window)
    worst = max_down(plan)
    for s, down in worst.items():
        svc = dep.catalog[s]
        if workflow == "upgrade" and not svc.rolling:
            assert down == len(dep.instances[s])
            assert any(w.service == s for w in verified.windows)
            continue
        a = allowance(svc, len(dep.instances[s]))
        assert a is None or down <= a, f"{s}: {down} down, {a} allowed"
    if workflow == "update":
        _one_visit_per_node(plan, dep)
        return _control_plane_first(plan)
    # a major upgrade: dependencies upgraded everywhere first
    first_stop: dict[str, float] = {}
    last_start: dict[str, float] = {}
    for u in plan.units:
        for s in u.stops:
            first_stop[s] = min(first_stop.get(s, float("inf")), u.start_s)
        for s in u.starts:
            last_start[s] = max(last_start.get(s, 0.0), u.end_s)
    for s, t in first_stop.items():
        for d in dep.catalog[s].depends_on:
            if d in last_start:
                assert t >= last_start[d] - 1e-9, f"{s} before its dependency {d}"
    _control_plane_first(plan)


def _control_plane_first(plan):
    ctrl = [u.end_s for u in plan.units if u.phase == "controlplane" and (u.stops or u.starts)]
    data = [u.start_s for u in plan.units if u.phase == "dataplane" and u.stops]
    if ctrl and data:
        assert min(data) >= max(ctrl)


def _one_visit_per_node(plan, dep):
    """A minor update takes each node out of service at most once and reboots it at most
    once; inside the visit a service starts after the ones it depends on."""
    visits = visits_per_node(plan)
    reboots: dict[str, int] = {}
    for u in plan.units:
        if u.step == "reboot":
            for n in u.nodes:
                reboots[n] = reboots.get(n, 0) + 1
        if u.step == "start":
            for n in u.nodes:
                started = u.services_on(n)
                for i, s in enumerate(started):
                    assert not set(dep.catalog[s].depends_on) & set(started[i + 1 :]), (
                        f"{s} starts on {n} before what it depends on"
                    )
    assert all(len(b) == 1 for b in visits.values()), {
        n: b for n, b in visits.items() if len(b) > 1
    }
    assert all(c <= 1 for c in reboots.values())


@SETTINGS
@given(clouds())
def test_update_plans_are_safe_for_any_layout(dep):
    _check(dep, "update")


@SETTINGS
@given(clouds())
def test_upgrade_plans_are_safe_for_any_layout(dep):
    _check(dep, "upgrade")


@st.composite
def clouds_with_facts(draw):
    """A random cloud and random facts: any subset of its packages changing on any subset
    of its nodes (a partly upgraded cloud looks the same: what is done no longer changes),
    new kernels on some nodes, and sometimes a --limit."""
    dep = draw(clouds())
    changes: dict[str, list[str]] = {}
    for n in dep.nodes:
        pkgs = sorted({p for s in dep.services_on(n) for p in dep.catalog[s].packages})
        chosen = (
            draw(st.lists(st.sampled_from(pkgs), unique=True, max_size=len(pkgs))) if pkgs else []
        )
        if draw(st.integers(0, 4)) == 0:
            chosen.append("kernel")
        if chosen:
            changes[n.name] = chosen
    limit = None
    if draw(st.integers(0, 3)) == 0:
        limit = ",".join(
            draw(
                st.lists(
                    st.sampled_from([n.name for n in dep.nodes]),
                    unique=True,
                    min_size=1,
                    max_size=3,
                )
            )
        )
    return dep, facts(dep, changes), limit


WORKFLOWS = ("update", "upgrade", "system-upgrade")
#: the least share of examples planned, of all and of each of the workflows listed (measured
#: on these derandomized examples: 86% of all, update 100%, upgrade 79%): refusing every input
#: is no pass. The OS upgrade of one node of a random cloud is refused by design in most draws
#: (its role's other nodes are not at the step it needs: ~7% planned over random draws, none
#: of these 9), so it has no share of its own here.
MIN_PLANNED = 0.5
MIN_PLANNED_OF = {"update": 0.5, "upgrade": 0.4}


def test_planner_and_verifier_agree():
    """Whatever the facts and the selection, the planner either refuses with a reason (an
    input error or an unsafe selection, before anything is shown) or makes a plan its own
    verifier accepts; an update touches each node at most once. Enough examples of each
    workflow are planned for that to say something."""
    outcomes: Counter[str] = Counter()
    of: dict[str, Counter[str]] = {w: Counter() for w in WORKFLOWS}

    # derandomized: the same examples every run, so CI never turns red on a draw (run with a
    # higher max_examples and without derandomize when changing the planner)
    @settings(
        max_examples=120,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(clouds_with_facts(), st.sampled_from(WORKFLOWS))
    def agree(case, workflow):
        outcome = _planned_and_verified(case, workflow)
        outcomes[outcome] += 1
        of[workflow][outcome] += 1

    agree()
    assert_share(outcomes, "planned", MIN_PLANNED)
    for w, minimum in MIN_PLANNED_OF.items():
        assert_share(of[w], "planned", minimum)


def _planned_and_verified(case, workflow) -> str:
    """Whether the planner "planned" (and its verifier accepted the plan) or "refused" (with a
    reason)."""
    dep, fx, limit = case
    if workflow == "system-upgrade":
        # the seed's OS upgrade names one node per command
        limit = (limit or dep.nodes[0].name).split(",")[0]
    try:
        plan = make_plan(workflow, dep, fx, limit)
    except (InputError, UnsafePlanError) as refused:
        assert str(refused).strip(), "a refusal says why"
        return "refused"
    verify_plan(plan, dep)
    if workflow == "update":
        _one_visit_per_node(plan, dep)
    return "planned"
