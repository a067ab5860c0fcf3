"""`export`: the plan as standalone Ansible playbooks, for operators who drive Ansible themselves.

The same plays stepwise runs (one per unit, in plan order), tagged with the unit's tags and
step; `system_upgrade_*` plays are also tagged `never`, so they run only when asked by name.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Mapping

from stepwise.model import Deployment
from stepwise.plan.units import Plan
from stepwise.run import ansible_env
from stepwise.run.ansible_files import to_yaml
from stepwise.run.inventory import Connector, inventory, plan_vars
from stepwise.run.render import render_unit


def export(plan: Plan, deployment: Deployment, out_dir: Path | str, *,
           connector: Connector | None = None) -> list[Path]:
    """Write playbooks, inventory and ansible.cfg to `out_dir`; returns the files written."""
    out = Path(out_dir)
    (out / "units").mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    plays = []
    for i, u in enumerate(plan.units):
        play = render_unit(plan, u, deployment, run_id="export", for_export=True)
        if play is None:
            continue
        plays.append(play)
        f = out / "units" / f"{i:04d}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', u.id)[:80]}.yml"
        f.write_text(f"# {u.step} on {', '.join(u.nodes) or 'deployment'}: {u.why}\n" + to_yaml([play]))
        written.append(f)
    site = out / "site.yml"
    site.write_text(f"# stepwise {plan.workflow} plan of {deployment.name}: {len(plays)} plays in order.\n"
                    "# Run: ansible-playbook -i inventory.yml site.yml [--limit ...] [--tags ...]\n" + to_yaml(plays))
    inv = inventory(deployment, connector, extra=plan_vars(plan, deployment))
    (out / "inventory.yml").write_text(to_yaml(inv))
    lib = out / "library"
    lib.mkdir(exist_ok=True)
    for m in ansible_env.LIBRARY_DIR.glob("*.py"):
        shutil.copy(m, lib / m.name)
    env = ansible_env.ansible_env(plugin_dirs=connector.plugin_dirs if connector else ())
    cfg = ["[defaults]", "library = ./library", "retry_files_enabled = False", "interpreter_python = auto_silent"]
    if env.get("ANSIBLE_CONNECTION_PLUGINS"):
        cfg.append(f"connection_plugins = {env['ANSIBLE_CONNECTION_PLUGINS']}")
    cfg += ["", "[connection]", "pipelining = True", ""]
    (out / "ansible.cfg").write_text("\n".join(cfg))
    (out / "plan.json").write_text(json.dumps(plan.to_json(), indent=1))
    written += [site, out / "inventory.yml", out / "ansible.cfg", out / "plan.json"]
    return written
