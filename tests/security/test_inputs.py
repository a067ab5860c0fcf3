"""Bad input of every class found in issue #10 is a clear error (exit 2) with no traceback;
bounded in time and memory; data prints as text (no rich markup); a bug is exit 70 with a log."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.security.helpers import EXAMPLES, cli, cli_process, no_traceback, write_cloud

CLASSIC = EXAMPLES / "classic.yaml"


def _bad_files(tmp: Path) -> dict[str, Path]:
    files = {
        "list": "- 1\n- 2\n",
        "scalar": "just text\n",
        "nonscalar_key": "? [a, b]\n: 1\n",
        "bracket_key": "a[/]b(c): 1\n",
        "inf": "a: .inf\n",
    }
    out = {k: tmp / f"{k}.yml" for k in files}
    for k, text in files.items():
        out[k].write_text(text)
    (tmp / "latin1.yml").write_bytes(b"a: \xff\xfe\n")
    out["latin1"] = tmp / "latin1.yml"
    return out


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "update", "-d", CLASSIC, "-e", "a='b"],
        ["plan", "update", "-d", CLASSIC, "-e", '{"a": Infinity}'],
        ["plan", "update", "-d", CLASSIC, "-e", "@"],
        ["plan", "update", "-d", CLASSIC, "-e", "a(b)=1"],
        ["plan", "update", "-d", CLASSIC, "-e", "target_release=[/]"],
        ["plan", "update", "-d", CLASSIC, "--limit", "a[/]b"],
        ["plan", "update", "-d", CLASSIC, "--tags", "[/]"],
        ["plan", "[/]", "-d", CLASSIC],
        ["plan", "update", "-d", CLASSIC, "--stage", "[bold]x"],
        ["update", "run", "-d", CLASSIC, "--lab", "/nonexistent"],
        ["history", "-d", CLASSIC, "--run", "99999999999999999999"],
        ["status", "-d", CLASSIC, "--store", "postgresql+psycopg://u@h:notaport/db"],
        ["status", "-d", CLASSIC, "--store", "nosuchdb://x"],
        ["status", "-d", CLASSIC, "--store", "sqlite:////proc/self"],
        ["validate", "-d", "/dev/zero"],
        ["validate", "-d", "/nonexistent.yaml"],
        ["validate", "-d", "/tmp"],
    ],
)
def test_bad_options_are_clear_errors(args):
    r = cli(*args)
    assert r.code == 2 and no_traceback(r.text), r.text


@pytest.mark.parametrize(
    "kind", ["list", "scalar", "nonscalar_key", "bracket_key", "inf", "latin1"]
)
def test_bad_extra_vars_and_inventory_files(tmp_path: Path, kind: str):
    f = _bad_files(tmp_path)[kind]
    dep = tmp_path / "classic.yaml"
    dep.write_text(CLASSIC.read_text())
    cases = [["plan", "update", "-d", dep, "-e", f"@{f}"], ["validate", "-d", f]]
    if kind not in ("bracket_key", "inf"):  # those two are mappings: a (useless) inventory
        cases.append(["update", "run", "-d", dep, "--inventory", f])
    for args in cases:
        r = cli(*args)
        assert r.code == 2 and no_traceback(r.text), (args, r.text)


def test_brackets_print_as_they_are(tmp_path: Path):
    r = cli("status", "-d", CLASSIC, "--store", "nosuchdb://x")
    assert "stepwise[postgres]" in r.text
    r = cli("plan", "update", "-d", CLASSIC, "--limit", "x[red]y[/]")
    assert "x[red]y[/]" in r.text
    r = cli("plan", "upgrade", "-d", CLASSIC)
    assert r.code == 0 and "backup controller-0 [galera]" in r.out  # rich ate '[galera]' before
    r = cli("validate", "-d", CLASSIC)
    assert "[controlplane]" in r.out


def test_markup_stored_by_a_failed_task_never_breaks_status(tmp_path: Path):
    dep = write_cloud(tmp_path, computes=1)
    assert (
        cli("update", "run", "-d", dep, "--limit", "Controller", "--json", "--no-prestage").code
        == 0
    )
    db = sqlite3.connect(tmp_path / ".stepwise" / "testcloud.sqlite")
    db.execute("UPDATE runs SET message = '[/] closing [bold]tag', status = 'failed'")
    db.execute("UPDATE units SET message = '[/]'")
    db.execute(
        "INSERT INTO task_results (run_id, unit_id, host, task, status, duration_s, message, at) "
        "VALUES (1, 'u1', 'ctl-0', '[/]t', 'failed', 0, '[/]stderr[red]', '2024-01-01')"
    )
    db.commit()
    db.close()
    for args in (["status"], ["history", "--run", "1"]):
        r = cli(*args, "-d", dep)
        assert r.code == 0 and no_traceback(r.text), r.text
        assert "[/]" in r.out
    assert cli("history", "-d", dep).code == 0


def test_non_finite_durations_are_refused(tmp_path: Path):
    dep = write_cloud(
        tmp_path,
        computes=1,
        extra_services={"slow": {"plane": "control", "durations": {"packages": float("inf")}}},
    )
    cat = tmp_path / "catalog" / "slow.yaml"
    cat.write_text(cat.read_text().replace("Infinity", ".inf"))
    r = cli("plan", "update", "-d", dep, "--json")
    assert r.code == 2 and "finite" in r.text and "Infinity" not in r.out


@pytest.mark.parametrize(
    "text",
    [
        # a 1 KB alias bomb: 9^9 values once expanded
        "a: &a [x,x,x,x,x,x,x,x,x]\n"
        + "".join(
            f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n"
            for p, c in zip("abcdefgh", "bcdefghi", strict=True)
        ),
        "[" * 100_000,  # crashed libyaml's composer (SIGSEGV)
        "name: n\nroles:\n- name: C\n  services: [nova_compute]\n"
        "  nodes: {count: 10000000, name: 'c{index}'}\n",
        "name: n\nroles:\n- name: C\n  services: [nova_compute]\n"
        "  nodes: {count: 1000000000000000000, name: 'c{index}'}\n",
    ],
)
def test_hostile_documents_are_refused_quickly_in_bounded_memory(tmp_path: Path, text: str):
    f = tmp_path / "d.yaml"
    f.write_text(text)
    r = cli_process("validate", "-d", f, timeout=30, memory_mb=1024)
    assert r.returncode == 2 and no_traceback(r.stdout + r.stderr), r.stderr[-2000:]


def test_a_bug_is_exit_70_with_a_log_not_a_traceback(tmp_path: Path, monkeypatch):
    import stepwise.cli.render as render  # plan_cmd imports it lazily, at the call

    def boom(*_a, **_k):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(render, "render_plan", boom)
    monkeypatch.setenv("STEPWISE_LOG_DIR", str(tmp_path / "logs"))
    r = cli("plan", "update", "-d", CLASSIC)
    assert r.code == 70 and "Traceback" not in r.text and "internal error" in r.text
    logs = list((tmp_path / "logs").iterdir())
    assert len(logs) == 1 and "ZeroDivisionError: a bug" in logs[0].read_text()
    assert str(logs[0]) in r.text and (logs[0].stat().st_mode & 0o077) == 0


def test_the_installed_command_has_the_same_guard(tmp_path: Path):
    r = cli_process("plan", "update", "-d", CLASSIC, "--limit", "a[/]b")
    assert r.returncode == 2 and no_traceback(r.stderr) and "a[/]b" in r.stderr
    assert json.loads(cli_process("validate", "-d", CLASSIC, "--json").stdout)["valid"]
