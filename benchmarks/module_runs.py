"""What one Ansible module run costs on a lab node: forked from the lab's module server, and
started as a process of its own with and without the compiled-code cache.

    .venv/bin/python benchmarks/module_runs.py [--runs 30] [--json]

A lab scenario is mostly Ansible module runs (a classic minor update: ~450), each a
`/usr/bin/python3` that imports Ansible's module_utils from its zipped payload. This has
Ansible send one `ansible.builtin.command: true` to a lab node through the `stepwise_lab`
connection (a node directory is all it needs: no lab process is started) and keep the module
file it ran (`ANSIBLE_KEEP_REMOTE_FILES`), then runs that file N times as the connection runs
it, with the lab's compiled-code cache (`stepwise/lab/ansible_plugins/nodepython`, warmed by a
first run) and without it, and handed to the lab's module server (`stepwise/lab/module_server.py`:
the nodes' interpreter with ansible-core's module_utils imported once, a child forked per run,
as the `stepwise_lab` connection hands it), and prints the CPU and wall seconds per module run
of each and the ratios. (Ansible's own share per task, on the controller, is not in these
figures.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _module_file(work: Path) -> Path:
    """The AnsiballZ file of one `command: true` run on a lab node, as Ansible sent it."""
    from stepwise.lab import ansible_plugin_dir

    lab = work / "lab"
    tmp = lab / "nodes" / "n1" / "root" / "tmp"
    tmp.mkdir(parents=True)
    (lab / "bin").mkdir()
    host = {
        "ansible_connection": "stepwise_lab",
        "stepwise_lab_dir": str(lab),
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_remote_tmp": str(tmp / ".ansible"),
    }
    (work / "inventory.json").write_text(json.dumps({"all": {"hosts": {"n1": host}}}))
    task = {"ansible.builtin.command": "true", "changed_when": False}
    play = [{"hosts": "n1", "gather_facts": False, "tasks": [task]}]
    (work / "play.json").write_text(json.dumps(play))
    env = {
        **os.environ,
        "ANSIBLE_CONNECTION_PLUGINS": ansible_plugin_dir(),
        "ANSIBLE_PIPELINING": "False",  # a file to keep, not a pipe
        "ANSIBLE_KEEP_REMOTE_FILES": "1",
        "ANSIBLE_LOCAL_TEMP": str(work / "local"),
    }
    playbook = str(Path(sys.executable).parent / "ansible-playbook")
    args = [playbook, "-i", str(work / "inventory.json"), str(work / "play.json")]
    subprocess.run(args, env=env, check=True, capture_output=True)
    return next(tmp.rglob("AnsiballZ_command.py"))


def _runs(module: Path, runs: int, cached: bool) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per run of the module file."""
    from stepwise.lab.ansible_plugins.connection.stepwise_lab import NODE_PYTHON, _code_cache

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    if cached:
        env.update(PYTHONPATH=NODE_PYTHON, STEPWISE_LAB_CODE_CACHE=_code_cache())
        subprocess.run(["/usr/bin/python3", str(module)], env=env, capture_output=True)
    cpu, t = _cpu(), time.perf_counter()
    for _ in range(runs):
        subprocess.run(["/usr/bin/python3", str(module)], env=env, capture_output=True, check=True)
    return (_cpu() - cpu) / runs, (time.perf_counter() - t) / runs


def _server_runs(work: Path, module: Path, runs: int) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per run handed to the lab's module server, as the
    connection hands it: the server's children's CPU (it reaps them) plus this client's."""
    from stepwise.lab import module_server
    from stepwise.lab.ansible_plugins.connection import stepwise_lab
    from stepwise.lab.control import down
    from stepwise.lab.nodes import Lab

    lab = Lab(work / "lab")
    module_server.start(lab, dict(os.environ))
    info = json.loads((lab.run_dir / module_server.INFO_FILE).read_text())
    client = stepwise_lab.nodecmd_client
    source = module.read_text()
    root = str(work / "lab" / "nodes" / "n1" / "root")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def one() -> int:
        devnull = os.open(os.devnull, os.O_RDONLY)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        sock = client.start(info["socket"], [info["python"], source], env, root,
                            (devnull, out_w, err_w))  # fmt: skip
        for fd in (devnull, out_w, err_w):
            os.close(fd)
        if sock is None:
            raise SystemExit("the module server did not take the run")
        stepwise_lab._read_both(out_r, err_r)
        return client.status(sock)

    def server_cpu() -> float:
        fields = Path(f"/proc/{info['pid']}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[14]) + int(fields[15])) / os.sysconf("SC_CLK_TCK")

    try:
        for _ in range(200):  # the server's imports
            try:
                if one() == 0:
                    break
            except SystemExit:
                time.sleep(0.05)
        mine = resource.getrusage(resource.RUSAGE_SELF)
        cpu0, t = server_cpu() + mine.ru_utime + mine.ru_stime, time.perf_counter()
        for _ in range(runs):
            if one() != 0:
                raise SystemExit("a module run through the server failed")
        wall = (time.perf_counter() - t) / runs
        mine = resource.getrusage(resource.RUSAGE_SELF)
        cpu = server_cpu() + mine.ru_utime + mine.ru_stime - cpu0
    finally:
        down(lab.dir)
    return cpu / runs, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sw-modruns-") as d:
        module = _module_file(Path(d))
        plain = _runs(module, a.runs, cached=False)
        cached = _runs(module, a.runs, cached=True)
        server = _server_runs(Path(d), module, a.runs)
    out = {
        "runs": a.runs,
        "cpu_per_run_server": round(server[0], 3),
        "wall_per_run_server": round(server[1], 3),
        "ratio_cached_to_server": round(cached[0] / server[0], 2),
        "cpu_per_run_cached": round(cached[0], 3),
        "cpu_per_run_plain": round(plain[0], 3),
        "ratio_plain_to_cached": round(plain[0] / cached[0], 2),
        "wall_per_run_cached": round(cached[1], 3),
        "wall_per_run_plain": round(plain[1], 3),
    }
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"one module run (`command: true`) on a lab node, {a.runs} runs each:")
    rows = (
        ("forked from the module server", "server"),
        ("with the compiled-code cache", "cached"),
        ("without it", "plain"),
    )
    for name, key in rows:
        cpu, wall = out[f"cpu_per_run_{key}"], out[f"wall_per_run_{key}"]
        print(f"  {name:<30} {cpu:.3f} s CPU  {wall:.3f} s wall")
    print(f"  CPU, own process / server    {out['ratio_cached_to_server']:.2f}x")
    print(f"  CPU, without / with cache    {out['ratio_plain_to_cached']:.2f}x")


if __name__ == "__main__":
    main()
