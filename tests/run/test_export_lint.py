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


#: a play's header line: site.yml is the plays one after the other, each starting with it
_PLAY = re.compile(r"(?m)^(?=- name: )")


def _distinct_plays(made: list[tuple[str, Path, str]], chosen: list[str], out: Path) -> list[str]:
    """Each chosen export's site.yml as `out/<name>.yml`, holding only the plays no export
    before it had (the same text but for node names, unit ids and batch numbers: one play
    per node of a role, and per batch, repeats it): a rule sees the same tasks, vars and tags,
    and ansible-lint's time grows with the file (2 MB of plays took ~220 s of CI's time).
    Returns the files written."""
    nodes = set()
    for name, example, _ in made:
        if name in chosen:
            nodes |= {n.name for r in load_deployment(example).roles for n in r.nodes}
    node = re.compile("|".join(re.escape(n) for n in sorted(nodes, key=len, reverse=True)))

    def key(play: str) -> str:
        k = re.sub(r"#\d+", "#", re.sub(r"\bu\d+\b", "U", node.sub("N", play)))
        # a list of nodes, however long, is one list
        return re.sub(r"(\n\s+- (!unsafe )?'?N'?)+", "\nL", k)

    seen: set[str] = set()
    files = []
    for name in chosen:
        head, *plays = _PLAY.split((out / name / "site.yml").read_text())
        new = []
        for play in plays:
            k = key(play)
            if k not in seen:
                seen.add(k)
                new.append(play)
        if new:
            (out / f"{name}.yml").write_text(head + "".join(new))
            files.append(f"{name}.yml")
    return files


def test_distinct_plays_keep_one_play_of_each_text(tmp_path: Path):
    """The plays linted are every export's plays but repeats: a play that differs from an
    earlier one in its tasks is kept, one that differs only in its nodes is not."""
    made = _export_all(tmp_path)
    chosen = [n for n in ("openstack-update", "openstack-upgrade") if n in {m[0] for m in made}]
    files = _distinct_plays(made, chosen, tmp_path)
    kept = [_PLAY.split((tmp_path / f).read_text())[1:] for f in files]
    update = _PLAY.split((tmp_path / "openstack-update" / "site.yml").read_text())[1:]
    # the update's first visit of a controller is kept; the other controllers' are not
    first = [p for p in update if "controller-0 " in p.splitlines()[0]]
    later = [p for p in update if "controller-1 " in p.splitlines()[0]]
    assert not set(first) & set(later)  # the plays of the visits (the checks name them all)
    assert first and later and all(p in kept[0] for p in first)
    assert not any(p in kept[0] for p in later)
    assert len(kept[0]) < len(update)
    # every task name of the export is still linted
    tasks = re.compile(r"(?m)^\s+- name: (.*)$")
    assert set(tasks.findall("".join(update))) == set(tasks.findall("".join(kept[0])))
    # the upgrade's plays that the update had already are left out, its own kept
    upgrade = _PLAY.split((tmp_path / "openstack-upgrade" / "site.yml").read_text())[1:]
    assert 0 < len(kept[1]) < len(upgrade)


def test_every_export_passes_ansible_lint_production(tmp_path: Path):
    made = _export_all(tmp_path)
    exportable = [e for e in WORKFLOW_TABLE.values() if not e.downgrades]
    assert len(made) == len(EXAMPLES) * len(exportable) - len(NOT_APPLYING)
    chosen = _cover(made)
    # every workflow and every style is linted
    assert {wf for name, _, wf in made if name in chosen} == {wf for _, _, wf in made}
    # the plays: site.yml holds every play of units/*.yml (the same dicts through the same
    # writer), so one file per export is linted, without its repeated plays, with its
    # inventory
    files = _distinct_plays(made, chosen, tmp_path) + [f"{d}/inventory.yml" for d in chosen]
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
