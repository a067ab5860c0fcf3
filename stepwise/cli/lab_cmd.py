"""`stepwise lab ...`: bring a rehearsal cloud up on this machine, probe it, break it, take it
down."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from stepwise.cli.app import app
from stepwise.cli.common import console, print_json, reported
from stepwise.cli.safety import esc

lab = typer.Typer(
    help="A real cloud on this machine (loopback nodes, real MariaDB and HAProxy) to test, "
    "demo and rehearse upgrades on.",
    no_args_is_help=True,
)
app.add_typer(lab, name="lab")

DirOpt = typer.Option(
    None,
    "--dir",
    help="Lab state directory (default: the only lab under ~/.local/state/stepwise/labs).",
)


@lab.command("up")
def up_cmd(
    deployment: Path = typer.Option(..., "--deployment", "-d", help="Deployment YAML file."),
    directory: Path | None = typer.Option(
        None, "--dir", help="Lab state directory (default: per deployment name)."
    ),
    workloads: int = typer.Option(
        1, "--workloads", min=0, max=20, help="Workloads (instances) per compute."
    ),
) -> None:
    """Bring up every node of the deployment: addresses, state, processes; wait until healthy."""
    from stepwise.lab.control import up

    with reported():
        t0 = time.monotonic()
        from stepwise.cli.buildbar import build_bar

        with build_bar(console) as build:
            lab_ = up(
                deployment,
                directory,
                workloads,
                build=build,
                progress=lambda m: console.print(f"[dim]{time.monotonic() - t0:5.1f}s[/] {esc(m)}"),
            )
        console.print(f"lab dir: {lab_.dir}", markup=False)


@lab.command("down")
def down_cmd(
    directory: Path | None = DirOpt,
    purge: bool = typer.Option(False, "--purge", help="Also delete the lab's state directory."),
) -> None:
    """End every process of the lab (also what a crashed supervisor left behind)."""
    import shutil

    from stepwise.lab.control import down, find_lab

    with reported():
        lab_ = find_lab(directory)
        n = down(lab_.dir)
        if purge:
            shutil.rmtree(lab_.dir, ignore_errors=True)
        console.print(f"lab down ({n} process(es) ended){'; state removed' if purge else ''}")


@lab.command("status")
def status_cmd(
    directory: Path | None = DirOpt, as_json: bool = typer.Option(False, "--json")
) -> None:
    """Nodes, address, OS major, services with version and state; workloads; cluster quorum."""
    from stepwise.lab.control import find_lab, status

    with reported():
        st = status(find_lab(directory))
        if as_json:
            print_json(st)
            return
        console.print(
            esc(f"lab {st['lab']}  VIP {st['vip']}  {st['dir']}")
            + ("" if st["supervisor"] else "  [red](supervisor not running)[/]")
        )
        for c in st["components"]:
            console.print(
                f"  [{'green' if c['kind'] == 'real' else 'yellow'}]{esc(c['kind']):<8}[/] "
                + esc(f"{c['name']}: {c['detail']}")
            )
        for n in st["nodes"]:
            console.print(
                f"[bold]{esc(n['name'])}[/] "
                + esc(
                    f"{n['address']} {n['role']} OS {n['os_major']} "
                    f"{n['release']} kernel {n['kernel']}"
                )
                + (" [red]DOWN[/]" if n["down"] else "")
            )
            if n.get("container_runtime"):
                console.print(f"    container runtime: {n['container_runtime']}", markup=False)
            for s in n["services"]:
                color = "green" if s["healthy"] else "red"
                console.print(
                    esc(f"    {s['name']:<22} {s['version'] or '-':<10} {s['kind']:<8} ")
                    + f"[{color}]{esc(s['state'])}[/]"
                    + (esc(f"  {s['runs']}") if s["kind"] == "real" else "")
                    + ("" if s["healthy"] else esc(f"  {s['health']}"))
                    + (f"  restarts {s['restarts']}" if s["restarts"] else "")
                )
        _say_workloads(st)
        for c, q in st["quorum"].items():
            console.print(f"  cluster {c}: {q}", markup=False)
        db = st.get("database") or {}
        if db:
            console.print(
                f"  database {db['service']}: real Galera cluster ({db['software']}), "
                f"{db['status']}, {db['cluster_size']} member(s): "
                + ", ".join(f"{n} {m['state']}" for n, m in db["members"].items()),
                markup=False,
            )


def _say_workloads(st: dict) -> None:
    """The workloads with their (stand-in) nova status, real nova's servers, the routers."""
    for w in st["workloads"]:
        console.print(
            esc(f"  workload {w['name']} on {w['host']} {w['address']} ")
            + f"[{'green' if w['healthy'] else 'red'}]{esc(w['state'])}[/]"
            + esc(f"  nova (stand-in): {w['status']}")
        )
    for s in st.get("servers", []):
        ok = s["status"] == "ACTIVE"
        console.print(
            esc(f"  server {s['name']} on {s['host']} ")
            + f"[{'green' if ok else 'red'}]{esc(s['status'])}[/]"
            + esc("  nova (real)")
        )
    for r in st.get("routers", []):
        console.print(
            esc(f"  router {r['name']} fip {r['fip']} -> {r['workload']} ")
            + esc(f"master {r['master'] or '-'} of {', '.join(r['hosts'])} ")
            + f"[{'green' if r['forwarding'] else 'red'}]"
            + ("forwarding" if r["forwarding"] else "not forwarding")
            + "[/]"
        )


@lab.command("probe")
def probe_cmd(
    directory: Path | None = DirOpt,
    duration: float = typer.Option(10.0, "--duration", min=0.5, max=3600, help="Seconds to probe."),
    rate: float = typer.Option(
        5.0, "--rate", min=0.1, max=50, help="Rounds of requests per second."
    ),
    out: Path | None = typer.Option(None, "--out", help="Append every outcome as JSON lines here."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Send real requests through every VIP and to every workload; summarise downtime."""
    from stepwise.lab.control import find_lab
    from stepwise.lab.probe import Probe

    with reported():
        p = Probe(find_lab(directory), rate=rate, out=out)
        try:
            p.run(until=duration)
        except KeyboardInterrupt:
            pass
        summary = p.summary()
        if as_json:
            print_json(summary)
            return
        for name, s in summary["targets"].items():
            color = "green" if not s["failed"] else "red"
            console.print(
                esc(f"{name:<28} ") + f"[{color}]{s['failed']:>5} failed[/] of {s['requests']:<6} "
                f"downtime {s['downtime_s']:.2f}s"
                + (esc(f"  ({s['first_error']})") if s["first_error"] else "")
            )
        t = summary["total"]
        console.print(f"total: {t['failed']} failed of {t['requests']}")
        if summary["stopped_early"]:
            console.print(f"[red]{esc(summary['stopped_early'])}[/]", soft_wrap=True)


@lab.command("fault")
def fault_cmd(
    kind: str = typer.Argument(
        ...,
        help="crash | recover | hang-stop | slow | disk-full | leapp-inhibitor | "
        "repos-unreachable | no-live-migrate | snapshot | registry-down | clear",
    ),
    node: str = typer.Argument(
        "", help="Node name ('registry', or none, for registry-down and its clear)."
    ),
    target: str | None = typer.Argument(
        None,
        help="Service (hang-stop), command (slow), the inhibitor's title (leapp-inhibitor) "
        "or instance (no-live-migrate, snapshot).",
    ),
    seconds: float = typer.Option(
        5.0, "--seconds", min=0, max=600, help="Delay for 'slow', length of a 'snapshot'."
    ),
    directory: Path | None = DirOpt,
) -> None:
    """Inject a fault: crash a node, hang a stop, slow a command, fill a disk, plant a leapp
    inhibitor, cut the repositories off, pin an instance, snapshot one (nova refuses to
    live-migrate it meanwhile)."""
    from stepwise.lab.control import find_lab
    from stepwise.lab.faults import inject

    with reported():
        console.print(inject(find_lab(directory), kind, node, target, seconds), markup=False)


@lab.command("exec")
def exec_cmd(
    node: str = typer.Argument(..., help="Node name."),
    command: list[str] = typer.Argument(
        ..., help="Command to run on the node, e.g. dnf list installed"
    ),
    directory: Path | None = DirOpt,
) -> None:
    """Run one node command on a lab node, as an Ansible task would."""
    import subprocess

    from stepwise.errors import InputError, Problem
    from stepwise.lab.control import find_lab

    with reported():
        lab_ = find_lab(directory)
        if node not in lab_.spec.nodes:
            raise InputError(
                Problem(f"unknown node '{node}'", hint=f"nodes: {', '.join(lab_.nodes())}")
            )
        rc = subprocess.run(
            command, env=lab_.node_env(node), cwd=str(lab_.node_root(node))
        ).returncode
        raise typer.Exit(rc)
