"""What a node runs after a packages unit is recorded by the unit's own package update (one
module run does both), with a task of its own only where the unit ends otherwise; the module
asks the repositories only about what the update did not just bring to the newest version."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import write_cloud

from stepwise.model import load_deployment
from stepwise.model.vocab import Step, Workflow
from stepwise.plan.units import Plan, Unit
from stepwise.run import render
from stepwise.run.node_work import RECORD_TASK, with_record
from stepwise.run.render import render_unit

sys.path.insert(0, str(Path(render.__file__).parent / "ansible" / "library"))
import stepwise_facts  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _controller_packages_unit() -> tuple[Plan, Unit, object]:
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    node = dep.roles[0].nodes[0].name
    services = tuple(s for s, nodes in dep.instances.items() if node in {n.name for n in nodes})
    u = Unit("p", Step.PACKAGES, (node,), services)
    return Plan(Workflow.UPDATE, dep.name, (u,)), u, dep


def test_the_batched_update_carries_the_record():
    plan, unit, dep = _controller_packages_unit()
    tasks = render_unit(plan, unit, dep)["tasks"]
    assert RECORD_TASK not in [t.get("name") for t in tasks]  # no task of its own
    last = tasks[-1]
    args = last["stepwise_facts"]
    # every node reports, one the batch leaves alone included: the condition moved inside
    assert "when" not in last
    assert args["update"] == (
        "{{ (['dnf', '-y', 'update'] + stepwise_dnf_update[0][inventory_hostname]) "
        "if (inventory_hostname in stepwise_dnf_update[0]) else [] }}"
    )
    assert args["packages"] == "{{ stepwise_record_packages[inventory_hostname] | default([]) }}"
    assert last["name"].startswith("Update the packages of")
    assert last["name"].endswith(", recorded)")
    # no other task updates packages: one dnf transaction, one module run
    assert not any("dnf" in str(t.get("ansible.builtin.command", "")) for t in tasks)


def test_the_plays_without_the_record_keep_the_plain_update():
    plan, unit, dep = _controller_packages_unit()
    tasks = render_unit(plan, unit, dep, record=False)["tasks"]
    assert not any("stepwise_facts" in t for t in tasks)
    assert tasks[-1]["when"] == "inventory_hostname in stepwise_dnf_update[0]"
    assert "stepwise_dnf_update" in tasks[-1]["ansible.builtin.command"]["argv"]


def test_a_unit_that_ends_otherwise_records_in_a_task_of_its_own(tmp_path: Path):
    # the tests' catalog writes its packages step as a shell command, not dnf's update
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    u = Unit("p", Step.PACKAGES, ("cmp-0",), ("worker",))
    tasks = render_unit(Plan(Workflow.UPDATE, dep.name, (u,)), u, dep)["tasks"]
    assert tasks[-1]["name"] == RECORD_TASK and "update" not in tasks[-1]["stepwise_facts"]
    # an update stepwise did not write (a service's own argv) is not taken over either
    own = {"name": "x", "ansible.builtin.command": {"argv": ["dnf", "-y", "update", "a"]}}
    assert with_record([own])[-1]["name"] == RECORD_TASK


class _Node:
    """The part of AnsibleModule the module's functions use, answering from canned output."""

    def __init__(self, params: dict, answers: dict[str, tuple[int, str]]) -> None:
        self.params = {"packages": [], "update": [], **params}
        self.answers = answers
        self.check_mode = False
        self.ran: list[list[str]] = []

    def run_command(self, cmd, use_unsafe_shell=False):
        self.ran.append(list(cmd))
        for prefix, (rc, out) in self.answers.items():
            if " ".join(cmd).startswith(prefix):
                return rc, out, ""
        return 127, "", "not found"

    def fail_json(self, **kw):
        raise RuntimeError(kw)

    def get_bin_path(self, name):
        return f"/usr/bin/{name}" if name in ("dnf", "dpkg-query") else None


def test_after_an_update_only_the_other_packages_are_asked_about():
    node = _Node(
        {"packages": ["a", "b", "c"], "update": ["dnf", "-y", "update", "a", "b"]},
        {
            "dnf -y update": (0, "Upgraded: a-2\nComplete!"),
            "dnf -q list installed": (0, "a.noarch 2-1 @r\nb.noarch 2-1 @r\nc.noarch 1-1 @r"),
            "dnf -q check-update": (100, "c.noarch 3-1 r"),
        },
    )
    result, fresh = stepwise_facts._update(node)
    assert result["changed"] and result["rc"] == 0 and fresh == {"a", "b"}
    got = stepwise_facts._packages(node, ["a", "b", "c"], fresh)
    assert got == {
        "a": {"installed": "2-1", "available": "2-1"},
        "b": {"installed": "2-1", "available": "2-1"},
        "c": {"installed": "1-1", "available": "3-1"},
    }
    assert ["dnf", "-q", "check-update", "c"] in node.ran  # not a, not b
    assert not any(c[:3] == ["dnf", "-q", "check-update"] and "a" in c for c in node.ran)


def test_an_update_that_changes_nothing_or_fails():
    node = _Node({"update": ["dnf", "-y", "update", "a"]}, {"dnf -y update": (0, "Nothing to do.")})
    assert stepwise_facts._update(node)[0]["changed"] is False
    node = _Node({"update": ["dnf", "-y", "update", "a"]}, {"dnf -y update": (1, "No match")})
    with pytest.raises(RuntimeError, match="the update failed"):
        stepwise_facts._update(node)
    assert stepwise_facts._update(_Node({}, {}))[0] == {"changed": False}


def test_dpkg_is_asked_once_for_all_packages():
    node = _Node(
        {},
        {
            "dpkg-query -W": (1, "a ii  1.0\nb un  \n"),
            "apt-cache policy": (
                0,
                "a:\n  Installed: 1.0\n  Candidate: 1.1\n  Version table:\n"
                "b:\n  Installed: (none)\n  Candidate: (none)\n",
            ),
        },
    )
    got = stepwise_facts._dpkg(node, ["a", "b"], set())
    assert got == {
        "a": {"installed": "1.0", "available": "1.1"},
        "b": {"installed": None, "available": None},
    }
    assert len(node.ran) == 2
