"""CI's ansible-lint gate (#24): every example exported in every workflow that applies to it
passes `ansible-lint --profile production` with the project's `.ansible-lint` (offline: no
galaxy), and a failure lists its findings per file and rule."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.model import load_deployment
from stepwise.plan.table import WORKFLOW_TABLE

_register()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
#: the workflows that do not apply to an example (no management node; only one)
NOT_APPLYING = {
    ("classic", "management-upgrade"),
    ("composed", "management-upgrade"),
    ("hci", "management-upgrade"),
    ("openstack", "management-upgrade"),
    ("undercloud", "system-upgrade"),
    ("tripleo-containers", "management-upgrade"),
    ("openstack-nova", "management-upgrade"),
}
_FINDING = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+)(?::\d+)?: (?P<rule>[\w\[\]-]+): ")


def _export_all(out: Path) -> list[tuple[str, Path, str]]:
    """Export every example in every workflow that applies; returns each export's directory
    name, example and workflow."""
    runner = CliRunner()
    made = []
    for example in EXAMPLES:
        for entry in WORKFLOW_TABLE.values():
            if entry.downgrades:
                continue  # a rollback is of a run in a store: none here (export takes no --run)
            wf = entry.name
            name = f"{example.stem}-{wf}"
            r = runner.invoke(app, ["export", wf, "-d", str(example), "-o", str(out / name)])
            if (example.stem, wf) in NOT_APPLYING:
                assert r.exit_code == 2, (name, r.output)  # refused with the reason, not a bug
                continue
            assert r.exit_code == 0, (name, r.output)
            made.append((name, example, wf))
    return made


def _what_it_holds(example: Path, workflow: str) -> set[tuple[str, ...]]:
    """What an export's plays are made of: each service's tasks of the workflow in its role's
    style, and stepwise's own work of the workflow (per style, and on a management node)."""
    dep = load_deployment(example)
    out: set[tuple[str, ...]] = set()
    for role in dep.roles:
        if not role.nodes:
            continue
        out.add((workflow, str(role.style), "management" if role.is_management else "node"))
        out.update((workflow, str(role.style), s) for s in role.services)
    return out


def _cover(made: list[tuple[str, Path, str]]) -> list[str]:
    """The fewest exports (greedy) whose plays hold everything every export holds: linting
    the others again finds nothing new (ansible-lint's syntax check starts an
    ansible-playbook per playbook; 30 exports took 455 s of CI's time)."""
    holds = {name: _what_it_holds(example, wf) for name, example, wf in made}
    left = set().union(*holds.values())
    chosen: list[str] = []
    while left:
        best = max(holds, key=lambda n: (len(holds[n] & left), n))
        chosen.append(best)
        left -= holds[best]
    return chosen


def test_every_export_passes_ansible_lint_production(tmp_path: Path):
    made = _export_all(tmp_path)
    exportable = [e for e in WORKFLOW_TABLE.values() if not e.downgrades]
    assert len(made) == len(EXAMPLES) * len(exportable) - len(NOT_APPLYING)
    chosen = _cover(made)
    # every workflow and every style is linted
    assert {wf for name, _, wf in made if name in chosen} == {wf for _, _, wf in made}
    # the plays: site.yml holds every play of units/*.yml (the same dicts through the same
    # writer), so one file per export is linted, with its inventory
    files = [f"{d}/{f}" for d in chosen for f in ("site.yml", "inventory.yml")]
    env = {
        **os.environ,
        # the plays' stepwise_facts module (the export's ansible.cfg points its copy)
        "ANSIBLE_LIBRARY": str(ROOT / "stepwise" / "run" / "ansible" / "library"),
        "NO_COLOR": "1",
    }
    lint = Path(sys.executable).with_name("ansible-lint")
    r = subprocess.run(
        [str(lint), "-c", str(ROOT / ".ansible-lint"), "--offline", "-f", "pep8", *files],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    findings = [m for m in map(_FINDING.match, r.stdout.splitlines()) if m]
    # no finding is tolerated: the catalog's tasks and stepwise's own node work are clean
    failing = Counter((m["file"], m["rule"]) for m in findings)
    report = "\n".join(f"{n:5} {f}: {rule}" for (f, rule), n in sorted(failing.items()))
    assert not failing, f"ansible-lint --profile production findings:\n{report}"
    # no finding unparsed: a crash or a syntax error fails too
    assert r.returncode == 0 or findings, r.stdout[-3000:] + r.stderr[-3000:]
