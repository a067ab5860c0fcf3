"""Bring a lab up, take it down, find it.

A lab's slot and processes are `slots`, what `lab status` reports is `status`; `status`,
`lab_pids` and `labs_home` stay importable from here.
"""

from __future__ import annotations

import os
import shutil
import signal
import site
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import stepwise
from stepwise.errors import InputError, Problem, StepwiseError
from stepwise.lab import boot, haproxy, mariadb
from stepwise.lab import containers as lab_containers
from stepwise.lab import services as lab_services
from stepwise.lab.boot import Progress
from stepwise.lab.nodes import ADDRESS_BASE, ENV_LAB, Lab, write_json
from stepwise.lab.slots import claim_index, lab_pids, labs_home, listeners, release_index
from stepwise.lab.spawn import spawn
from stepwise.lab.spec import build_spec
from stepwise.lab.status import status
from stepwise.processes import pid_alive

__all__ = ["down", "find_lab", "lab_pids", "labs_home", "status", "up"]

NODE_COMMANDS = (
    "dnf",
    "yum",
    "df",
    "tripleo-repos",
    "systemctl",
    "crudini",
    "os-apply-config",
    "pcs",
    "ceph",
    "nova",
    "openstack",
    "leapp",
    "reboot",
    "reprovision",
    "rsync",
    "healthcheck",
    "socat",
    "mariadb",
    "mysql",
    "mariadb-dump",
    "mysqldump",
    "mariadb-upgrade",
    "mysql_upgrade",
    "podman",
    "skopeo",
    "rabbitmqctl",
    "galera_new_cluster",
    "sed",
    "rm",
)


def write_bin(lab: Lab) -> None:
    """One entry script, linked under every command name (the node's PATH comes first)."""
    b = lab.bin_dir
    b.mkdir(parents=True, exist_ok=True)
    entry = b / "stepwise-lab-cmd"
    # -S: no site module. Its .pth files (the editable install's finder among them) took 45 of
    # a node command's ~230 ms, and Ansible's tasks call node commands by the thousand; the
    # paths site would have added are given instead (stepwise's own, then the packages')
    paths = [str(Path(stepwise.__file__).resolve().parents[1]), *site.getsitepackages()]
    # the lab's node-command server runs the call when it is up (`nodecmd_server`: the
    # imports done once); the client imports nothing of stepwise and returns when no server
    # took the call, and the command then runs here as before
    client_dir = str(
        Path(stepwise.__file__).resolve().parent / "lab" / "ansible_plugins" / "nodecmd_client"
    )
    entry.write_text(
        f"#!{sys.executable} -S\nimport sys\nsys.path.insert(0, {client_dir!r})\n"
        f"from stepwise_nodecmd_client import call\ncall({lab.nodecmd_socket_name!r})\n"
        f"sys.path[1:1] = {paths!r}\n"
        "from stepwise.lab.nodecmd import main\nmain()\n"
    )
    entry.chmod(0o755)
    names = list(NODE_COMMANDS) + [f"{p}-manage" for p in lab.spec.projects]
    names += [f"{p}-status" for p in lab.spec.projects]
    if "neutron" in lab.spec.projects:
        names.append("neutron-db-manage")
    # octavia-db-manage, mistral-db-manage, aodh-dbsync, ...: the upstream names of schema tools
    from stepwise.lab.nodecmd import SYNC_TOOLS

    names += [f"{p}-db-manage" for p in lab.spec.projects if p in ("octavia", "mistral")]
    names += [tool for tool, (p, _w) in SYNC_TOOLS.items() if p in lab.spec.projects]
    if lab.spec.openstack:
        from stepwise.lab.openstack import releases

        names += [t for t, svc in releases.TOOLS.items() if svc in lab.spec.openstack.services]
    for n in names:
        link = b / n
        if not link.exists():
            link.symlink_to("stepwise-lab-cmd")


def prepare_nodes(lab: Lab) -> None:
    db = lab.spec.db_service
    mariadb.ensure_template() if db else None
    for node in lab.nodes():
        lab_services.install_initial(lab, node)
        for s in lab.node(node).services:
            lab_services.render_config(lab, node, s)
        lab.write_state(node, "units.json", {"enabled": sorted(lab.node(node).services)})
        if db and db in lab.node(node).services:
            mariadb.init_datadir(
                lab.node_root(node), mariadb.installed_format(lab_services.installed(lab, node))
            )
    lab_services.save_workloads(lab, lab_services.workloads(lab))
    haproxy.write_config(lab.spec, lab.dir)
    for node in lab.nodes():
        # the load balancer's runtime API where a controller has it (TripleO's haproxy
        # container mounts it there): here the lab's one HAProxy
        stats = lab.node_path(node, haproxy.NODE_STATS_SOCKET)
        stats.parent.mkdir(parents=True, exist_ok=True)
        stats.unlink(missing_ok=True)
        stats.symlink_to(haproxy.admin_socket(lab))


def start_supervisor(lab: Lab) -> int:
    env = dict(os.environ)
    env[ENV_LAB] = str(lab.dir)
    proc = spawn(lab, env, "supervisor.log", ["stepwise.lab.supervisor", str(lab.dir)])
    write_json(lab.run_dir / "supervisor.json", {"pid": proc.pid})
    lab.supervisor_pid_file.write_text(str(proc.pid))
    start_nodecmd_server(lab, env)
    for _ in range(200):
        if lab.supervisor_alive():
            return proc.pid
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise StepwiseError(
        Problem("the lab supervisor did not start", file=str(lab.log_dir / "supervisor.log"))
    )


def start_nodecmd_server(lab: Lab, env: dict[str, str]) -> None:
    """Start the lab's node-command server (`nodecmd_server`) beside the supervisor. It holds
    the lab in its environment, so `down` ends it with the lab's other processes; a lab whose
    server is not up runs each node command in a process of its own, as before."""
    if os.environ.get("STEPWISE_LAB_NODECMD_SERVER") == "0":
        return
    name = lab.nodecmd_socket_name.lstrip("\0")
    argv = ["stepwise.lab.nodecmd_server", str(lab.dir), name]
    proc = spawn(lab, env, "nodecmd-server.log", argv)
    (lab.run_dir / "nodecmd-server.pid").write_text(str(proc.pid))
    # and its module runs: the same fork server under the nodes' interpreter
    from stepwise.lab import module_server

    module_server.start(lab, env)


def check_tools(dep: Any) -> None:
    """The real components a lab of `dep` runs are installed (else what to install)."""
    for tool in (mariadb.check_installed, haproxy.binary):
        try:
            tool()
        except RuntimeError as exc:
            raise StepwiseError(
                Problem(
                    str(exc),
                    hint="apt-get install -y mariadb-server mariadb-client galera-4 "
                    "mariadb-backup socat haproxy",
                )
            ) from None
    if any(r.style in lab_containers.container_styles() for r in dep.roles):
        from stepwise.lab import registry

        try:
            registry.check_installed()
        except RuntimeError as exc:
            raise StepwiseError(Problem(str(exc), hint=registry.HINT)) from None


def up(
    deployment: str | Path,
    lab_dir: str | Path | None = None,
    workloads_per_compute: int = 1,
    progress: Progress = lambda _m: None,
    timeout: float = 120.0,
    build: Any = None,
) -> Lab:
    """Bring up every node of a deployment on this machine; returns when all is healthy.

    `build(done, total, what)` follows the one-time build of real OpenStack venvs (none when
    they are cached, or when the deployment asks for no real OpenStack)."""
    from stepwise.model import load_deployment

    t0 = time.monotonic()
    dep = load_deployment(deployment)
    check_tools(dep)
    directory = Path(lab_dir or labs_home() / dep.name).resolve()
    lab = Lab(directory)
    if lab.exists() and lab.supervisor_alive():
        raise InputError(
            Problem(f"a lab is already up in {directory}", hint="run 'stepwise lab down' first")
        )
    if directory.exists():
        down(directory)
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    index = claim_index(directory)
    try:
        _refuse_taken_addresses(index)
        spec = build_spec(dep, str(directory), index, workloads_per_compute)
        write_json(lab.spec_file, spec.to_json())
        write_bin(lab)
        progress(
            f"lab {dep.name}: {len(spec.nodes)} nodes on 127.{100 + index}.0.0/16 in {directory}"
        )
        if spec.openstack:
            prepare_openstack(lab, progress, build)
        prepare_nodes(lab)
        start_supervisor(lab)
        start_infra(lab)
        if spec.containers:
            start_registry(lab, progress)
        try:
            boot.boot_all(lab, progress)
        except RuntimeError as exc:  # a real service's own tool or API refused: its words
            raise StepwiseError(
                Problem(
                    f"lab up: {exc}",
                    file=str(lab.dir),
                    hint="the services' own logs are under nodes/NODE/root/var/log/ there",
                )
            ) from None
        boot.wait_healthy(lab, timeout)
    except BaseException:
        down(directory)
        raise
    progress(f"lab up in {time.monotonic() - t0:.1f}s")
    return lab


def _refuse_taken_addresses(index: int) -> None:
    """Before anything starts: the slot's addresses and loopback ports are free. A process
    left running by a lab whose supervisor was killed (a RabbitMQ member, a mariadbd) would
    otherwise make this lab's members fail to bind, or join the wrong cluster."""
    from stepwise.lab import rabbitmq

    taken = listeners(f"127.{ADDRESS_BASE + index}.", rabbitmq.loopback_ports(index))
    if taken:
        raise StepwiseError(
            Problem(
                f"lab slot {index}: its addresses are in use by processes no lab runs "
                f"({', '.join(taken[:6])}{', ...' if len(taken) > 6 else ''})",
                hint="they are left from a lab whose supervisor was killed: end them "
                "(`ss -ltnp` names them) or `stepwise lab down --dir` that lab, then bring "
                "this one up again",
            )
        )


def start_infra(lab: Lab) -> None:
    """What the real infrastructure services need before any member starts: the RabbitMQ
    members' Erlang cookie and the lab's own port mapper (their binaries checked first)."""
    from stepwise.lab import memcached, rabbitmq

    try:
        if memcached.servers(lab):
            memcached.binary()
        if rabbitmq.real_services(lab):
            rabbitmq.check_installed()
            rabbitmq.write_cookie(lab)
            lab.call("start", node="_lab", unit=rabbitmq.EPMD_UNIT)
    except RuntimeError as exc:
        raise StepwiseError(
            Problem(str(exc), hint="run scripts/setup.sh (Debian: memcached, rabbitmq-server)")
        ) from None


def start_registry(lab: Lab, progress: Progress) -> None:
    """The real registry under the supervisor, the stand-ins' images pushed into it, and each
    container-style node's deployed images pulled and containers created (the deployment)."""
    from stepwise.lab import podman, registry

    registry.write_config(lab)
    t0 = time.monotonic()
    lab.call("start", node="_lab", unit=registry.UNIT)
    try:
        registry.wait_ready(lab)
        times = registry.publish(lab)
    except RuntimeError as exc:
        raise StepwiseError(Problem(str(exc), hint=registry.HINT)) from None
    progress(
        f"registry {lab.spec.containers.lab_registry} up: "
        f"{len(lab.spec.containers.services)} image(s) "
        f"(built {times['built']} layout(s) in {times['build_s']:.1f}s, "
        f"pushed in {times['push_s']:.1f}s)"
    )
    nodes = [n for n in lab.nodes() if lab_containers.node_style(lab.spec, n)]
    t1 = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(4, len(nodes)))) as ex:
            list(ex.map(lambda n: _deploy_containers(lab, n), nodes))
    except podman.PodmanError as exc:
        raise StepwiseError(Problem(str(exc), hint=registry.HINT)) from None
    progress(
        f"containers created on {len(nodes)} node(s) in {time.monotonic() - t1:.1f}s "
        f"(registry and images: {time.monotonic() - t0:.1f}s)"
    )


def _deploy_containers(lab: Lab, node: str) -> None:
    """The deployment on a container-style node: its containers created from the deployed
    images, then its config step rendering for the version each container runs."""
    from stepwise.lab import podman

    podman.deploy(lab, node)
    for s in lab.node(node).services:
        if lab_containers.containerized(lab.spec, node, s):
            lab_services.render_config(lab, node, s)


def prepare_openstack(lab: Lab, progress: Progress, build: Any = None) -> None:
    """The real OpenStack venvs (built once per machine: said, timed) and the lab's password."""
    from stepwise.lab.openstack import bootstrap, venvs

    series = lab.spec.openstack.series
    missing = [n for n in bootstrap.venvs_needed(series) if not venvs.is_built(n)]
    t0 = time.monotonic()
    if missing:
        progress(
            f"building the real OpenStack venvs once for this machine: {', '.join(missing)} "
            f"(cached in {venvs.cache_root()})"
        )
    try:
        bootstrap.prepare(lab, build)
    except venvs.VenvError as exc:
        raise StepwiseError(
            Problem(
                str(exc),
                hint="check that PyPI is reachable, then run 'stepwise lab up' "
                "again (what was built is kept)",
            )
        ) from None
    if missing:
        progress(f"venvs built in {time.monotonic() - t0:.1f}s")
    placed = ", ".join(lab.spec.openstack.services)
    progress(f"real OpenStack {series}: {placed or 'no OpenStack service on these nodes'}")


def find_lab(lab_dir: str | Path | None) -> Lab:
    """The lab named by --dir; without it, the one lab that runs under the labs home (labs
    already down do not count: a script that brought up several labs one after another still
    finds the one left running), or the only lab there is when none runs."""
    if lab_dir:
        lab = Lab(lab_dir)
        if not lab.exists():
            raise InputError(
                Problem(
                    f"no lab in {lab.dir}",
                    hint="bring one up with 'stepwise lab up --deployment FILE'",
                )
            )
        return lab
    found = [Lab(p.parent) for p in sorted(labs_home().glob("*/lab.json"))]
    running = [lab for lab in found if lab.supervisor_alive()]
    if len(running) == 1:
        return running[0]
    if not running and len(found) == 1:
        return found[0]
    if not found:
        raise InputError(
            Problem(
                f"no lab under {labs_home()}",
                hint="bring one up with 'stepwise lab up --deployment FILE'",
            )
        )
    which = running or found
    listed = ", ".join(str(lab.dir) for lab in which[:10]) + (", ..." if len(which) > 10 else "")
    raise InputError(
        Problem(
            f"{len(which)} labs {'run' if running else 'exist, none running,'} under "
            f"{labs_home()}: {listed}",
            hint="name the lab directory with --dir",
        )
    )


def down(lab_dir: str | Path) -> int:
    """End every process of a lab (even if its supervisor died); returns how many were killed."""
    lab = Lab(lab_dir)
    if lab.supervisor_alive():
        try:
            lab.call("shutdown", timeout=30)
        except Exception:  # noqa: BLE001 - fall through to killing by PID
            pass
    killed = 0
    for _ in range(3):
        pids = lab_pids(lab)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.05)
    for f in (lab.pids_file, lab.run_dir / "units"):
        if f.is_dir():
            shutil.rmtree(f, ignore_errors=True)
        else:
            f.unlink(missing_ok=True)
    release_index(lab.dir)
    return killed
