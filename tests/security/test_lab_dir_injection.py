"""What a `--lab` directory and the environment bring into an export is data: a template in a
lab's `lab.json` never runs when Ansible reads the exported inventory, and an environment
variable stepwise copies into the exported `ansible.cfg` never adds sections or keys to it."""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.lab_json import lab_json
from tests.security.helpers import cli, no_traceback, write_cloud

ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def _payload(canary: Path) -> str:
    return "{{ lookup('pipe', 'touch " + str(canary) + "') }}"


def _lab(directory: Path, address: str = "127.1.0.2") -> Path:
    """A lab directory as `lab up` leaves it (only its lab.json: export reads nothing else)."""
    directory.mkdir(parents=True)
    nodes = {
        "ctl-0": {"role": "Controller", "address": "127.1.0.1"},
        "cmp-0": {"role": "Compute", "address": address},
    }
    (directory / "lab.json").write_text(lab_json(nodes))
    return directory


def _show_vars(out: Path, names: list[str]) -> str:
    """Run the export's inventory through ansible-playbook (the export's own ansible.cfg),
    printing each variable: Ansible renders whatever in them is template code."""
    play = out / "show.yml"
    play.write_text(
        json.dumps(
            [
                {
                    "hosts": "cmp-0",
                    "gather_facts": False,
                    "tasks": [{"ansible.builtin.debug": {"msg": "{{ " + n + " }}"}} for n in names],
                }
            ]
        )
    )
    done = subprocess.run(
        [
            str(ANSIBLE_PLAYBOOK),
            "-i",
            "inventory.yml",
            "show.yml",
            "-e",
            "ansible_connection=local",
        ],
        cwd=out,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_template_as_a_lab_address_is_refused_and_never_runs(tmp_path: Path):
    canary = tmp_path / "PWNED"
    dep = write_cloud(tmp_path, computes=1)
    lab = _lab(tmp_path / "lab", address=_payload(canary))
    out = tmp_path / "export"
    r = cli("export", "update", "-d", dep, "-o", out, "--lab", lab)
    assert r.code == 2, r.text
    assert no_traceback(r.text)
    assert "lab.json" in r.text and "cmp-0" in r.text and "address" in r.text
    assert not out.exists() and not canary.exists()


def test_what_the_lab_brings_reaches_the_exported_inventory_as_data(tmp_path: Path):
    # a lab directory's path is the operator's, but its name may be anything: the lab's
    # values (node roots, flag files, the lab's directory) must reach Ansible as text
    canary = tmp_path / "PWNED"
    dep = write_cloud(tmp_path, computes=1)
    lab = _lab(tmp_path / ("lab{{ lookup('pipe', 'touch PWNED') }}"))
    out = tmp_path / "export"
    r = cli("export", "update", "-d", dep, "-o", out, "--lab", lab)
    assert r.code == 0, r.text
    text = _show_vars(
        out,
        ["stepwise_lab_dir", "stepwise_flag_dir", "stepwise_node_address", "ansible_host"],
    )
    assert text.count("lookup('pipe', 'touch PWNED')") == 2, text
    assert "127.1.0.2" in text
    assert not canary.exists() and not (out / "PWNED").exists()


def test_an_environment_value_never_adds_to_the_exported_ansible_cfg(tmp_path: Path, monkeypatch):
    dep = write_cloud(tmp_path, computes=1)
    out = tmp_path / "export"
    evil = "/tmp/plugins\n[defaults]\nvault_password_file = /tmp/x\ncallback_plugins = /tmp/cb"
    monkeypatch.setenv("ANSIBLE_CONNECTION_PLUGINS", evil)
    r = cli("export", "update", "-d", dep, "-o", out)
    assert r.code == 2, r.text
    assert no_traceback(r.text)
    assert "ANSIBLE_CONNECTION_PLUGINS" in r.text
    assert not out.exists()


def test_the_exported_ansible_cfg_holds_only_the_keys_stepwise_chose(tmp_path: Path, monkeypatch):
    dep = write_cloud(tmp_path, computes=1)
    out = tmp_path / "export"
    monkeypatch.setenv("ANSIBLE_CONNECTION_PLUGINS", "/opt/100%/plugins")
    r = cli("export", "update", "-d", dep, "-o", out)
    assert r.code == 0, r.text
    cfg = configparser.ConfigParser(inline_comment_prefixes=(";",))  # as Ansible reads it
    cfg.read(out / "ansible.cfg")
    assert {s: set(cfg[s]) for s in cfg.sections()} == {
        "defaults": {
            "library",
            "retry_files_enabled",
            "interpreter_python",
            "connection_plugins",
        },
        "connection": {"pipelining"},
    }
    assert cfg["defaults"]["connection_plugins"] == "/opt/100%/plugins"
