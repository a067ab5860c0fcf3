"""A changed configuration (facts: `config: {SERVICE: {current, rendered}}`) plans a rolling
restart of that service in the minor update, under the same availability rules."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stepwise.errors import InputError
from stepwise.model import load_deployment
from stepwise.model.facts import facts_from_dict, facts_to_dict, load_facts
from stepwise.model.facts_template import facts_template
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import selection_for
from stepwise.verify import plan_verified

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OLD, NEW = "a" * 64, "b" * 64


@pytest.fixture(scope="module")
def classic():
    return load_deployment(EXAMPLES / "classic.yaml")


def _facts_file(tmp_path: Path, dep, config: dict, packages: dict | None = None) -> Path:
    """No package changes anywhere (all at their available version) except `packages`
    (node -> changing packages); `config` is node -> service -> changed (True) or not, or the
    service's config fact itself."""
    pkgs = sorted({p for s in dep.instances for p in dep.catalog[s].packages})
    nodes = {}
    for node, services in config.items():
        nodes[node] = {
            "config": {
                s: changed
                if isinstance(changed, dict)
                else {"current": OLD, "rendered": NEW if changed else OLD}
                for s, changed in services.items()
            }
        }
    for node, changing in (packages or {}).items():
        nodes.setdefault(node, {})["packages"] = {
            p: {"installed": "1.0.0", "available": "1.1.0"} for p in changing
        }
    path = tmp_path / "facts.yaml"

    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {
                    "packages": {p: {"installed": "1.0.0", "available": "1.0.0"} for p in pkgs}
                },
                "nodes": nodes,
            }
        )
    )
    return path


def _update(dep, facts):
    return plan_verified(Workflow.UPDATE, dep, facts, selection_for(Workflow.UPDATE))


def _work(plan, step: Step) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for u in plan.units:
        if u.step is step:
            for n in u.nodes:
                out.setdefault(n, set()).update(u.services_on(n))
    return out


def test_no_change_plans_nothing(classic, tmp_path):
    facts = load_facts(
        _facts_file(tmp_path, classic, {"controller-0": {"keystone": False}}), classic
    )
    assert not _update(classic, facts).units


def test_config_only_change_restarts_service_rolling_without_packages(classic, tmp_path):
    config = {f"controller-{i}": {"keystone": True} for i in range(3)}
    plan = _update(classic, load_facts(_facts_file(tmp_path, classic, config), classic))
    assert plan.units, "a changed configuration must not give an empty plan"
    # no package is updated anywhere
    assert not [u for u in plan.units if u.step is Step.PACKAGES]
    # keystone gets its configuration, stops and starts on each controller, and only keystone
    for step in (Step.CONFIG, Step.STOP, Step.START):
        assert _work(plan, step) == {f"controller-{i}": {"keystone"} for i in range(3)}
    # it leaves and rejoins the load balancer around the restart (the catalog's leave/rejoin)
    assert set(_work(plan, Step.LEAVE)) == {f"controller-{i}" for i in range(3)}
    assert set(_work(plan, Step.REJOIN)) == {f"controller-{i}" for i in range(3)}
    # the rule (Controller update_serial 1, keystone min_available) holds: one node at a time
    starts = [u for u in plan.units if u.stops]
    assert len(starts) == 3 and all(len(u.nodes) == 1 for u in starts)
    assert all("configuration changed: keystone" in u.why for u in starts)
    assert not plan.windows


def test_mixed_package_and_config_changes(classic, tmp_path):
    config = {"controller-1": {"keystone": True}, "compute-0": {"nova_compute": True}}
    packages = {"controller-0": ["openstack-keystone"]}
    path = _facts_file(tmp_path, classic, config, packages)
    plan = _update(classic, load_facts(path, classic))
    # packages only where they change; the restart (config/stop/start) where either changed
    assert _work(plan, Step.PACKAGES) == {"controller-0": {"keystone"}}
    restarted = _work(plan, Step.START)
    assert restarted == {
        "controller-0": {"keystone"},
        "controller-1": {"keystone"},
        "compute-0": {"nova_compute"},
    }
    assert set(_work(plan, Step.CONFIG)) == set(restarted)
    # the compute drains (its leave) before its restart like in any visit
    assert "compute-0" in _work(plan, Step.LEAVE)
    whys = " ".join(u.why for u in plan.units if u.stops)
    assert "configuration changed: keystone" in whys
    assert "configuration changed: nova_compute" in whys


def test_config_change_with_unknown_hash_is_no_change(classic, tmp_path):
    config = {"controller-0": {"keystone": {"current": OLD}}, "controller-1": {"keystone": {}}}
    path = _facts_file(tmp_path, classic, config)
    assert not _update(classic, load_facts(path, classic)).units


def test_config_hash_round_trips_through_recorded_facts(classic, tmp_path):
    config = {"controller-2": {"keystone": True}}
    facts = load_facts(_facts_file(tmp_path, classic, config), classic)
    again = facts_from_dict(facts_to_dict(facts), classic)
    assert again.config_changes("controller-2", "keystone")
    assert not again.config_changes("controller-1", "keystone")


def test_config_of_a_service_not_on_the_node_is_refused(classic, tmp_path):
    path = _facts_file(tmp_path, classic, {"compute-0": {"keystone": True}})
    with pytest.raises(InputError) as exc:
        load_facts(path, classic)
    problem = exc.value.problems[0]
    assert "keystone" in problem.message and "compute-0" in problem.message
    assert problem.field == "nodes.compute-0.config.keystone" and problem.line


def test_config_wrong_shape_says_the_shape(classic, tmp_path):
    path = tmp_path / "facts.yaml"
    path.write_text("nodes:\n  controller-0:\n    config:\n      keystone: abc\n")
    with pytest.raises(InputError) as exc:
        load_facts(path, classic)
    assert "{current: HASH, rendered: HASH}" in str(exc.value.problems[0].message)


def test_template_lists_config_per_service(classic):
    doc = facts_template(classic)
    assert doc["nodes"]["compute-0"]["config"]["nova_compute"] == {
        "current": None,
        "rendered": None,
    }
    assert "keystone" not in doc["nodes"]["compute-0"]["config"]


def test_upgrade_is_unchanged_by_config_facts(classic, tmp_path):
    """Only the minor update restarts for configuration: a major upgrade changes every
    package (and renders every configuration) anyway."""
    config = {"controller-0": {"keystone": True}}
    facts = load_facts(_facts_file(tmp_path, classic, config), classic)
    plain = load_facts(_facts_file(tmp_path, classic, {}), classic)
    sel = selection_for(Workflow.UPGRADE)
    a = plan_verified(Workflow.UPGRADE, classic, facts, sel, runnable=False)
    b = plan_verified(Workflow.UPGRADE, classic, plain, sel, runnable=False)
    assert [(u.step, u.nodes) for u in a.units] == [(u.step, u.nodes) for u in b.units]
