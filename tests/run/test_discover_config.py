"""discover's configuration hashes: what the node module reports for each service (the file it
runs with and the one the deployment rendered, by the node's own sha256sum) and how discover
puts it into the facts."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from stepwise.run import discover
from stepwise.run.discover import CONFIG_CURRENT, CONFIG_RENDERED, _facts_entry, config_files

sys.path.insert(0, str(Path(discover.__file__).parent / "ansible" / "library"))
import stepwise_facts  # noqa: E402


class _Module:
    """The part of AnsibleModule `_config` uses: run a command on the node."""

    def run_command(self, cmd, use_unsafe_shell=False):
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        return res.returncode, res.stdout, res.stderr


def _write(root: Path, path: str, text: str) -> str:
    f = root / path.lstrip("/")
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(text)
    return hashlib.sha256(text.encode()).hexdigest()


def test_module_hashes_running_and_rendered_config_under_the_node_root(tmp_path: Path):
    cur = _write(tmp_path, CONFIG_CURRENT.format(service="keystone"), "[DEFAULT]\ndebug = false\n")
    new = _write(tmp_path, CONFIG_RENDERED.format(service="keystone"), "[DEFAULT]\ndebug = true\n")
    same = _write(tmp_path, CONFIG_CURRENT.format(service="glance_api"), "[DEFAULT]\n")
    config = {s: config_files(s) for s in ("keystone", "glance_api", "nova_api")}
    got = stepwise_facts._config(_Module(), config, str(tmp_path))
    # a missing file has no hash (nova_api has none: left out; glance_api: nothing rendered)
    assert got == {"keystone": {"current": cur, "rendered": new}, "glance_api": {"current": same}}


def test_discover_entry_keeps_the_config_hashes():
    entry = _facts_entry(
        {"packages": {}, "config": {"keystone": {"current": "a", "rendered": None}}}, None
    )
    assert entry["config"] == {"keystone": {"current": "a"}}
