"""Secrets (-e keys that look secret, --secret from a file or the environment) never reach
the store, history, JSON, the "continue with" hint or Ansible's kept artifacts; they reach
Ansible only through a private file removed after the run. Store files are private."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

from tests.security.helpers import cli, no_traceback, write_cloud

SECRETS = {
    "db_password": "S3cretPassw0rd",
    "api_token": "T0kenValue2x",
    "vault_key": "F1leSecret3x",
    "other": "EnvSecret4xyz",
}


def _leaky_cloud(root: Path) -> Path:
    """The run tests' cloud plus a service whose packages step prints every secret and fails."""
    leak = (
        "echo pw={{ db_password }} tok={{ nested.api_token }} f={{ vault_key }} e={{ other }} >&2; "
        "echo pw={{ db_password }}; exit 1"
    )
    dep = write_cloud(
        root,
        computes=1,
        extra_services={
            "leaky": {
                "plane": "control",
                "availability": {"max_unavailable": 1},
                "update": {
                    "packages": [{"name": "leak {{ db_password }}", "ansible.builtin.shell": leak}]
                },
            }
        },
    )
    data = json.loads(dep.read_text())
    data["roles"][0]["services"].append("leaky")
    dep.write_text(json.dumps(data))
    return dep


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _assert_clean(text: str | bytes) -> None:
    blob = text.encode() if isinstance(text, str) else text
    for name, value in SECRETS.items():
        assert value.encode() not in blob, f"the secret {name} leaked"


def test_secrets_never_kept_or_shown(tmp_path: Path, monkeypatch):
    dep = _leaky_cloud(tmp_path)
    (tmp_path / "vault").write_text(SECRETS["vault_key"] + "\n")
    monkeypatch.setenv("OTHER_SECRET", SECRETS["other"])
    r = cli(
        "update",
        "run",
        "-d",
        dep,
        "--limit",
        "Controller",
        "--json",
        "--no-prestage",
        "--keep-artifacts",
        "-e",
        f"db_password={SECRETS['db_password']}",
        "-e",
        json.dumps({"nested": {"api_token": SECRETS["api_token"]}}),
        "--secret",
        f"vault_key=@{tmp_path / 'vault'}",
        "--secret",
        "other=env:OTHER_SECRET",
    )
    assert r.code == 1 and no_traceback(r.text), r.text
    _assert_clean(r.text)
    result = json.loads(r.out)
    assert "db_password=****" in result["message"]  # the "continue with" hint, masked
    assert "pw=****" in result["message"]  # what the task printed, masked
    # the store (database, WAL), the kept work directory and its Ansible artifacts
    _assert_clean(_all_bytes(tmp_path / ".stepwise"))
    cmd_files = list((tmp_path / ".stepwise" / "work").rglob("command"))
    assert cmd_files, "ansible-runner artifacts were kept"
    secret_file = re.search(
        r'@(/[^"]*stepwise-secret-[^"/]*/secret\.yml)', cmd_files[0].read_text()
    )
    assert secret_file, "the secrets reached Ansible through a file"
    assert not Path(secret_file.group(1)).parent.exists(), (
        "the private secrets directory is removed"
    )
    for args in (
        ["history"],
        ["history", "--json"],
        ["history", "--run", str(result["run_id"])],
        ["history", "--run", str(result["run_id"]), "--json"],
        ["status"],
        ["status", "--json"],
    ):
        out = cli(*args, "-d", dep)
        assert out.code == 0, out.text
        _assert_clean(out.text)


def test_a_refused_command_records_no_secret(tmp_path: Path):
    dep = write_cloud(tmp_path, computes=1)
    r = cli(
        "upgrade",
        "prepare",
        "-d",
        dep,
        "-e",
        "target_release=R2",
        "-e",
        f"db_password={SECRETS['db_password']}",
    )
    assert r.code == 2 and "confirmation" in r.text
    _assert_clean(r.text)
    assert not (tmp_path / ".stepwise").exists() or not _all_bytes(tmp_path / ".stepwise").count(
        b"S3cret"
    )


def test_store_and_directories_are_private(tmp_path: Path):
    dep = write_cloud(tmp_path, computes=1)
    r = cli("update", "run", "-d", dep, "--limit", "Controller", "--json", "--no-prestage")
    assert r.code == 0, r.text
    base = tmp_path / ".stepwise"
    assert stat.S_IMODE(base.stat().st_mode) == 0o700
    for p in base.rglob("*"):
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode & 0o077 == 0, f"{p} is {oct(mode)}"
    assert (base / "testcloud.sqlite").exists()


def test_an_old_world_readable_store_is_made_private(tmp_path: Path):
    from stepwise.run.store import open_store

    f = tmp_path / "old.sqlite"
    open_store(f"sqlite:///{f}").close()
    f.chmod(0o644)
    open_store(f"sqlite:///{f}").close()
    assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_bad_secret_sources_are_input_errors(tmp_path: Path):
    dep = write_cloud(tmp_path, computes=1)
    for spec in ("novalue", "k=plain", "k=@/nonexistent", "k=env:STEPWISE_NO_SUCH_VAR", "1k=@x"):
        r = cli("update", "run", "-d", dep, "--secret", spec)
        assert r.code == 2 and no_traceback(r.text) and "--secret" in r.text, (spec, r.text)
