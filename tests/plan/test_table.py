"""The table of workflows: every workflow has one entry, every command one home, and the layers
read the entry's traits instead of naming workflows."""

from __future__ import annotations

import ast
from pathlib import Path

from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.model.vocab import Workflow
from stepwise.plan import STAGES, WORKFLOW_ALIASES, workflow_label
from stepwise.plan.commands import COMMANDS, FAMILIES, Command
from stepwise.plan.table import WORKFLOW_TABLE, Bound, StoredFacts, entry

ROOT = Path(__file__).resolve().parents[2] / "stepwise"


def test_every_workflow_has_one_entry_and_every_command_one_home():
    assert set(WORKFLOW_TABLE) == set(Workflow)
    homes = [c for e in WORKFLOW_TABLE.values() for c in e.commands]
    assert sorted(homes) == sorted(Command)
    assert set(COMMANDS) == set(Command)
    assert {c.family for c in Command} == set(FAMILIES)


def test_the_traits_say_what_the_workflows_are():
    update, upgrade = entry(Workflow.UPDATE), entry(Workflow.UPGRADE)
    os_upgrade, management = entry(Workflow.SYSTEM_UPGRADE), entry(Workflow.UNDERCLOUD_UPGRADE)
    assert update.rolling and upgrade.rolling and not os_upgrade.rolling
    assert update.bound is Bound.WORK and os_upgrade.bound is Bound.SEGMENT
    assert upgrade.expand_contract and upgrade.dependency_order and upgrade.pins_rpc
    assert not update.pins_rpc and os_upgrade.pins_rpc and os_upgrade.replaces_os
    assert management.whole_outage and management.shows_named_steps
    assert upgrade.stored_facts is StoredFacts.NONE
    assert os_upgrade.stored_facts is StoredFacts.NODES
    assert STAGES == {Workflow.UPGRADE: upgrade.stages}


def test_the_operator_names_come_from_the_table():
    assert workflow_label(Workflow.UNDERCLOUD_UPGRADE) == "management-upgrade"
    assert workflow_label(Workflow.UPDATE) == "update"
    assert WORKFLOW_ALIASES == {"management-upgrade": Workflow.UNDERCLOUD_UPGRADE}


def test_the_cli_has_a_command_per_table_command_and_the_stored_name_as_alias():
    _register()
    runner = CliRunner()
    for command in Command:
        out = runner.invoke(app, [command.family, command.verb, "--help"])
        assert out.exit_code == 0, out.output
        first_words = COMMANDS[command].help.split()[:3]
        assert " ".join(first_words) in " ".join(out.output.split())
    hidden = runner.invoke(app, ["undercloud-upgrade", "run", "--help"])
    assert hidden.exit_code == 0
    assert "undercloud-upgrade" not in runner.invoke(app, ["--help"]).output


def test_no_layer_above_the_plan_names_a_workflow():
    """verify, run and observe read traits; naming `Workflow.X` there is a second table (the
    CLI's demo may name the workflows it runs)."""
    offenders = []
    for layer in ("verify", "run", "observe"):
        for path in sorted((ROOT / layer).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "Workflow"
                    and node.attr in Workflow.__members__
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} Workflow.{node.attr}")
    assert offenders == []
