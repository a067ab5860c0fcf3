"""`upgrade:` writes only what differs from `update:` (docs/catalog.md "What `upgrade:` does not
write"): a node step it does not name is the update's, `step: []` says none, and a problem in a
shared step is reported once, where it is written."""

from __future__ import annotations

from stepwise.model import load_catalog
from stepwise.model.choices import DeployStyle
from stepwise.model.vocab import Section, Step, UpgradeKey
from tests.model.test_model_errors import only, small_catalog

SVC = """\
name: svc
plane: control
update:
  validate: [{name: check, ansible.builtin.command: check svc}]
  leave: [{name: drain, ansible.builtin.command: drain svc}]
  stop: [{name: stop, ansible.builtin.command: systemctl stop svc}]
  start: [{name: start, ansible.builtin.command: systemctl start svc}]
  post: [{name: after start, ansible.builtin.command: healthcheck svc}]
  pin: [{name: pin, ansible.builtin.command: pin svc}]
upgrade:
  leave: []
  pre: [{name: save, ansible.builtin.command: save svc}]
  unpin: [{name: unpin, ansible.builtin.command: unpin svc}]
"""


def _names(steps, step) -> list[str]:
    return [t["name"] for t in steps.get(step, ())]


def test_a_node_step_upgrade_does_not_name_is_the_updates(tmp_path):
    svc = load_catalog(small_catalog(tmp_path, svc=SVC))["svc"]
    up = svc.steps(Section.UPGRADE)
    assert up[Step.VALIDATE] == svc.steps(Section.UPDATE)[Step.VALIDATE]
    # `post` goes with the `start` it belongs to
    assert _names(up, Step.START) == ["start", "after start"]
    # `leave: []` names the step: the upgrade has none
    assert Step.LEAVE not in up and not svc.has_step(Section.UPGRADE, Step.LEAVE)
    # `pre` names `stop`: the update's stop tasks are not added to it
    assert _names(up, Step.STOP) == ["save"]
    # pin, unpin, backup and restore are an upgrade's own, never taken from `update:`
    assert UpgradeKey.PIN not in up and _names(up, UpgradeKey.UNPIN) == ["unpin"]
    assert _names(svc.steps(Section.UPDATE), Step.STOP) == ["stop"]


def test_a_styles_upgrade_takes_the_styles_update_steps(tmp_path):
    text = SVC + (
        "styles:\n  tripleo:\n    update:\n"
        "      rejoin: [{name: unban, ansible.builtin.command: pcs resource clear svc}]\n"
    )
    svc = load_catalog(small_catalog(tmp_path, svc=text))["svc"]
    tripleo = svc.styled(DeployStyle.TRIPLEO)
    assert _names(tripleo.steps(Section.UPGRADE), Step.REJOIN) == ["unban"]
    assert Step.REJOIN not in svc.steps(Section.UPGRADE)  # the entry as written has none


def test_the_schema_sync_is_the_upgrades_migrate_not_the_updates(tmp_path):
    text = (
        "name: svc\nplane: control\n"
        "update:\n  migrate: [{name: minor sync, ansible.builtin.command: svc-manage sync}]\n"
        "schema:\n  strategy: expand_contract\n"
        "  expand: [{name: expand, ansible.builtin.command: svc-manage expand}]\n"
    )
    svc = load_catalog(small_catalog(tmp_path, svc=text))["svc"]
    assert _names(svc.steps(Section.UPGRADE), Step.MIGRATE) == ["expand"]
    assert _names(svc.steps(Section.UPDATE), Step.MIGRATE) == ["minor sync"]


def test_a_problem_in_a_shared_step_is_reported_once_where_it_is_written(tmp_path):
    # `upgrade:` takes this `start` from `update:`: the fault is still named at line 7
    bad = SVC.replace(
        "  start: [{name: start, ansible.builtin.command: systemctl start svc}]", "  start: [42]"
    )
    p = only(load_catalog, small_catalog(tmp_path, svc=bad))
    assert p.file.endswith("svc.yaml")
    assert (p.line, p.field) == (7, "update.start[0]")


def test_the_built_in_unpins_restart_one_node_at_a_time():
    """The converge's unpin runs on every node of a service at once (one unit): a restart in
    it is throttled to one host, so the cloud never has all its conductors (or schedulers)
    down together. The scheduler is not restarted: it sends no compute RPC, and a restart of
    the last one fails the computes' casts to its fanout exchange."""
    catalog = load_catalog()
    restarts = [
        (name, t)
        for name, svc in catalog.services.items()
        for t in svc.steps(Section.UPGRADE).get(UpgradeKey.UNPIN, ())
        if any(isinstance(args, dict) and args.get("state") == "restarted" for args in t.values())
    ]
    assert "nova_conductor" in {name for name, _ in restarts}
    assert "nova_scheduler" not in {name for name, _ in restarts}
    assert all(t.get("throttle") == 1 for _, t in restarts), restarts
