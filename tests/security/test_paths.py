"""Issue #19, paths and special files: every input path is opened one safe way (a regular
file or refused, never a FIFO or a device, length-checked, read with a bound, a catalog's
files never through a link) and every output file written one safe way (never through a
planted link, never over a file stepwise did not write unless --force, atomic). What is
refused is left exactly as it was: bytes, mode, and the target of a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from tests.security.helpers import EXAMPLES, ROOT, cli, cli_process, no_traceback

CLASSIC = EXAMPLES / "classic.yaml"
THT = ROOT / "tests" / "fixtures" / "tripleo"
ROLES = THT / "roles_data_classic.yaml"
LONG = "x" * 300


def _state(p: Path) -> tuple[bytes, int]:
    """What must not change on a refusal: the bytes and the mode (of the target of a link)."""
    return p.read_bytes(), stat.S_IMODE(p.stat().st_mode)


# ------------------------------------------------------------------------------ long names
@pytest.mark.parametrize(
    "args",
    [
        ["plan", "update", "-d", CLASSIC, "-e", f"@/tmp/{LONG}"],
        ["plan", "update", "-d", CLASSIC, "--facts", f"/tmp/{LONG}"],
        ["plan", "update", "-d", f"/tmp/{LONG}.yaml"],
        ["status", "-d", CLASSIC, "--store", f"sqlite:////tmp/{LONG}.sqlite"],
        ["plan", "update", "-d", CLASSIC, "--store", f"sqlite:////tmp/{LONG}.sqlite"],
        ["export", "update", "-d", CLASSIC, "-o", f"/tmp/{LONG}"],
        ["export", "update", "-d", CLASSIC, "-o", "OUT", "-i", f"/tmp/{LONG}"],
        ["export", "update", "-d", CLASSIC, "-o", "OUT", "--lab", f"/tmp/{LONG}"],
        ["catalog", "list", "-c", f"/tmp/{LONG}"],
        ["plan", "update", "-d", CLASSIC, "--html", f"/tmp/{LONG}.html"],
        ["import", "tripleo", "-r", ROLES, "-o", f"/tmp/{LONG}.yaml"],
        ["import", "tripleo", "-r", f"/tmp/{LONG}", "-o", "-"],
    ],
)
def test_names_over_255_bytes_are_clear_errors(tmp_path: Path, args: list):
    args = [str(tmp_path / "out") if a == "OUT" else a for a in args]
    r = cli(*args)
    assert r.code == 2 and no_traceback(r.text), r.text
    assert not (tmp_path / "out").exists()


def test_a_catalog_path_over_255_bytes_in_the_deployment(tmp_path: Path):
    dep = tmp_path / "d.yaml"
    dep.write_text(yaml.safe_dump({**yaml.safe_load(CLASSIC.read_text()), "catalog": LONG}))
    r = cli("validate", "-d", dep)
    assert r.code == 2 and no_traceback(r.text) and "too long" in r.text and "catalog" in r.text, (
        r.text
    )


# ------------------------------------------------------------------------------ FIFOs
def _fifo(tmp_path: Path, name: str = "fifo.yaml") -> Path:
    p = tmp_path / name
    os.mkfifo(p)
    return p


@pytest.mark.parametrize(
    "case",
    [
        "deployment",
        "facts",
        "extra",
        "secret",
        "inventory",
        "roles",
        "import-inv",
        "catalog-file",
        "html",
    ],
)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path, case: str):
    fifo = _fifo(tmp_path)
    cat = tmp_path / "cat"
    args = {
        "deployment": ["validate", "-d", fifo],
        "facts": ["plan", "update", "-d", CLASSIC, "--facts", fifo],
        "extra": ["plan", "update", "-d", CLASSIC, "-e", f"@{fifo}"],
        "secret": [
            "update",
            "run",
            "-d",
            CLASSIC,
            "--secret",
            f"k=@{fifo}",
            "--lab",
            tmp_path / "no-lab",
        ],
        "inventory": ["export", "update", "-d", CLASSIC, "-o", tmp_path / "out", "-i", fifo],
        "roles": ["import", "tripleo", "-r", fifo, "-o", "-"],
        "import-inv": ["import", "inventory", fifo, "-o", "-"],
        "catalog-file": ["catalog", "list", "-c", cat],
        "html": ["plan", "update", "-d", CLASSIC, "--html", fifo],
    }[case]
    if case == "catalog-file":
        cat.mkdir()
        for f in (EXAMPLES / "catalog").glob("*.yaml"):
            (cat / f.name).write_bytes(f.read_bytes())
        os.mkfifo(cat / "zz.yaml")
    r = cli_process(
        *args, timeout=60
    )  # a blocked open would hang here (and fail the test on timeout)
    assert r.returncode == 2 and no_traceback(r.stderr), r.stderr
    assert "FIFO" in r.stderr, r.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # the FIFO is still there, not replaced by a file


def test_a_device_is_refused(tmp_path: Path):
    for args in (
        ["plan", "update", "-d", CLASSIC, "-e", "@/dev/zero"],
        ["plan", "update", "-d", CLASSIC, "--facts", "/dev/null"],
        ["plan", "update", "-d", CLASSIC, "--html", "/dev/null"],
    ):
        r = cli(*args)
        assert r.code == 2 and "device" in r.text and no_traceback(r.text), r.text


# ------------------------------------------------------------------------------ output files
def test_import_never_writes_through_a_planted_link(tmp_path: Path):
    victim = tmp_path / "victim.conf"
    victim.write_text("precious\n")
    victim.chmod(0o640)
    before = _state(victim)
    link = tmp_path / "out.yaml"
    link.symlink_to(victim)
    for extra in ([], ["--force"]):
        r = cli("import", "tripleo", "-r", ROLES, "-o", link, *extra)
        assert r.code == 2 and "symbolic link" in r.text and no_traceback(r.text), r.text
        assert _state(victim) == before and link.is_symlink()


def test_import_replaces_only_what_it_wrote_unless_forced(tmp_path: Path):
    other = tmp_path / "notes.yaml"
    other.write_text("mine: true\n")
    before = _state(other)
    r = cli("import", "tripleo", "-r", ROLES, "-o", other)
    assert r.code == 2 and "--force" in r.text and _state(other) == before, r.text
    out = tmp_path / "d.yaml"
    assert cli("import", "tripleo", "-r", ROLES, "-o", out).code == 0
    assert (
        cli("import", "tripleo", "-r", ROLES, "-o", out, "--stack", "other").code == 0
    )  # its own: replaced
    assert yaml.safe_load(out.read_text())["name"] == "other"
    assert cli("import", "tripleo", "-r", ROLES, "-o", other, "--force").code == 0
    assert yaml.safe_load(other.read_text())["name"] == "overcloud"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "d.yaml",
        "notes.yaml",
    ]  # no temporary file left


def test_the_report_replaces_only_a_report(tmp_path: Path):
    mine = tmp_path / "page.html"
    mine.write_text("<html>mine</html>")
    before = _state(mine)
    r = cli("plan", "update", "-d", CLASSIC, "--html", mine)
    assert r.code == 2 and _state(mine) == before and no_traceback(r.text), r.text
    out = tmp_path / "plan.html"
    assert cli("plan", "update", "-d", CLASSIC, "--html", out).code == 0
    assert cli("plan", "upgrade", "-d", CLASSIC, "--html", out).code == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert cli("plan", "update", "-d", CLASSIC, "--html", mine, "--force").code == 0
    assert "mine" not in mine.read_text()


# ------------------------------------------------------------------------------ links not followed
def test_a_catalog_file_linked_to_a_private_file_is_not_quoted(tmp_path: Path):
    private = tmp_path / "shadow"
    private.write_text("db_password: hunter2-first-line\nroot:x:0:0\n")
    private.chmod(0o600)
    cat = tmp_path / "cat"
    cat.mkdir()
    for f in (EXAMPLES / "catalog").glob("*.yaml"):
        (cat / f.name).write_bytes(f.read_bytes())
    (cat / "zz.yaml").symlink_to(private)
    for args in (["catalog", "list", "-c", cat], ["plan", "update", "-d", CLASSIC]):
        if args[0] == "plan":
            dep = tmp_path / "d.yaml"
            dep.write_text(
                yaml.safe_dump({**yaml.safe_load(CLASSIC.read_text()), "catalog": "cat"})
            )
            args = ["plan", "update", "-d", dep]
        r = cli(*args)
        assert r.code == 2 and no_traceback(r.text), r.text
        assert "hunter2" not in r.text and "db_password" not in r.text and "root:x" not in r.text
        assert "symbolic link" in r.text


def test_paths_module_reads_a_bounded_regular_file(tmp_path: Path):
    from stepwise.errors import InputError
    from stepwise.paths import read_input

    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert read_input(f, limit=100) == b"x" * 100
    with pytest.raises(InputError, match="too large"):
        read_input(f, limit=99)
    link = tmp_path / "l"
    link.symlink_to(f)
    assert read_input(link) == b"x" * 100
    with pytest.raises(InputError, match="symbolic link"):
        read_input(link, follow=False)
    with pytest.raises(InputError, match="NUL"):
        read_input(f"{f}\x00x")
    with pytest.raises(InputError, match="directory"):
        read_input(tmp_path)
