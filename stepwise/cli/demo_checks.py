"""What `stepwise demo` checks on its lab around the runs: the versions stepwise's status
records against what the nodes have installed, each node's kernel, and on a lab of real
OpenStack the seeded resources, the schemas and tempest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.text import Text

from stepwise.cli.common import console, err_console
from stepwise.lab.openstack.tempest_conf import TempestList


def agreement(store, dep, lab_dir: Path) -> dict[str, Any]:
    """Does stepwise's status (store) say what the lab's nodes really have installed?"""
    from stepwise.lab import services as lab_services
    from stepwise.lab.nodes import Lab

    lab = Lab(lab_dir)
    rows = {(r.node, r.service): r.version for r in store.node_services(dep.name)}
    mismatches = []
    checked = 0
    for node in dep.nodes:
        installed = lab_services.installed(lab, node.name)
        for svc in dep.services_on(node):
            pkgs = dep.catalog[svc].packages
            if not pkgs or pkgs[0] not in installed:
                continue
            checked += 1
            real = installed[pkgs[0]]["version"]
            if rows.get((node.name, svc)) != real:
                mismatches.append(
                    {
                        "node": node.name,
                        "service": svc,
                        "stepwise": rows.get((node.name, svc)),
                        "lab": real,
                    }
                )
    return {"checked": checked, "mismatches": mismatches}


def kernels(lab_dir: Path) -> dict[str, dict[str, str | None]]:
    """Each lab node's kernel: the newest installed package and the one running."""
    from stepwise.lab import services as lab_services
    from stepwise.lab.nodes import Lab

    lab = Lab(lab_dir)
    return {
        n: {
            "installed": lab_services.installed(lab, n).get("kernel", {}).get("version"),
            "running": (lab.read_state(n, "kernel.json", {}) or {}).get("running"),
        }
        for n in lab.nodes()
    }


def _openstack_before(lab_dir: Path, report: dict[str, Any], say) -> dict[str, Any] | None:
    """On a lab of real OpenStack: resources created before the runs, to find after them."""
    from stepwise.lab.nodes import Lab

    lab = Lab(lab_dir)
    if not lab.spec.openstack:
        return None
    from concurrent.futures import ThreadPoolExecutor

    from stepwise.lab.openstack import checks

    # the schemas are read by the projects' own tools (processes of their own) while the
    # resources are made through the APIs: neither waits for the other
    with ThreadPoolExecutor(max_workers=1) as pool:
        before = pool.submit(checks.schemas, lab)
        seeded = checks.seed(lab)
        schemas_before = before.result()
    report["openstack"] = {
        "series": lab.spec.openstack.series,
        "services": lab.spec.openstack.services,
        "seeded": sorted(k for k in seeded if k != "image_md5"),
        "schemas_before": schemas_before,
    }
    say(
        f"real OpenStack {lab.spec.openstack.series}: seeded a project, "
        "a resource provider and an image to find again after the upgrade"
    )
    return seeded


def _openstack_after(
    lab_dir: Path,
    seeded: dict[str, Any] | None,
    report: dict[str, Any],
    work: Path,
    json_out: bool,
    tempest_list: TempestList = TempestList.FULL,
) -> None:
    """Schemas at the new code's head, the seed resources kept, tempest's verdict (its short
    list or its full one)."""
    if seeded is None:
        return
    from stepwise.lab.nodes import Lab
    from stepwise.lab.openstack import checks

    lab = Lab(lab_dir)
    os_report = report["openstack"]
    from concurrent.futures import ThreadPoolExecutor

    # tempest runs its tests while the schemas and the seeded resources are read (they only
    # read: tempest's tests make resources of their own): ~7 s less of the demo's end
    with ThreadPoolExecutor(max_workers=1) as pool:
        tempest = pool.submit(
            checks.acceptance, lab, work / "tempest", short=tempest_list is TempestList.SHORT
        )
        os_report["schemas"] = checks.schemas(lab)
        os_report["seed"] = checks.seed_kept(lab, seeded)
        os_report["tempest"] = tempest.result()
    client = _client_calls(report["phases"])
    os_report["client"] = client
    if json_out:
        return
    _say_openstack(os_report, client)


def _client_calls(phases: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """The OpenStack client's calls and failures per target over all phases, and how many of
    the failures fell outside the windows the plans announced (a cloud with one controller
    announces its APIs' windows; three controllers announce none, so every failure counts)."""
    client: dict[str, dict[str, int]] = {}
    for p in phases:
        outside = p["probe"].get("failed_outside_windows", {})
        for target, t in p["probe"].get("client", {}).items():
            c = client.setdefault(target, {"calls": 0, "failed": 0, "outside_windows": 0})
            c["calls"] += t["requests"]
            c["failed"] += t["failed"]
            c["outside_windows"] += outside.get(target, 0)
    return client


def _say_openstack(os_report: dict[str, Any], client: dict[str, dict[str, int]]) -> None:
    """Each schema against its code's head, the client's calls, the seed kept, tempest."""
    for svc, sc in os_report["schemas"].items():
        before = os_report["schemas_before"].get(svc, {}).get("version")
        moved = (
            f"{before} -> {sc['version']}"
            if before != sc["version"]
            else f"{sc['version']} (unchanged)"
        )
        console.print(
            Text(
                f"{svc}: schema {moved}, {'at the head of' if sc['at_head'] else 'BEHIND'} "
                f"{sc['code']}",
                style="green" if sc["at_head"] else "red",
            ),
            soft_wrap=True,
        )
    for target, c in sorted(client.items()):
        inside = c["failed"] - c["outside_windows"]
        console.print(
            Text(
                f"openstack client, {target}: {c['calls']} calls, {c['failed']} failed"
                + (f" ({inside} inside the announced windows)" if inside else ""),
                style="green" if not c["outside_windows"] else "red",
            ),
            soft_wrap=True,
        )
    kept = os_report["seed"]
    console.print(
        Text(
            f"seeded resources: {kept['checked'] - len(kept['missing'])} of {kept['checked']} kept"
            + "".join(f"\n   missing: {m}" for m in kept["missing"]),
            style="green" if kept["kept"] else "red",
        ),
        soft_wrap=True,
    )
    t = os_report["tempest"]
    console.print(
        Text(
            f"tempest ({t.get('list', 'full')} list): {t['run']} tests, {t['passed']} passed, "
            f"{t['failed']} failed, "
            f"{t['skipped']} skipped in {t['seconds']:.0f}s"
            + (
                " (passed: "
                + ", ".join(f"{api} {n}" for api, n in t.get("passed_by_api", {}).items())
                + ")"
                if t.get("passed_by_api")
                else ""
            )
            + "".join(f"\n   failed: {f}" for f in t["failures"][:10]),
            style="green" if t["ok"] else "red",
        ),
        soft_wrap=True,
    )


def failed_checks(report: dict[str, Any]) -> list[str]:
    """The checks the demo reports that failed, one line each (none: every check passed): a
    probe that stopped sampling early, requests or client calls that failed outside the
    windows the plans announced, a schema behind its code, a failed OpenStack client call, a
    seeded resource missing, tempest not passing, stepwise's status disagreeing with the lab.
    The demo exits non-zero when there is one: a report that says FAILED must not exit 0."""
    out: list[str] = []
    for p in report.get("phases", []):
        probe = p["probe"]
        if probe.get("stopped_early"):
            out.append(f"{p['phase']}: the probe {probe['stopped_early']}")
        unannounced = sum(probe.get("failed_outside_windows", {}).values())
        if unannounced:
            out.append(f"{p['phase']}: {unannounced} failed outside the announced windows")
    out += _openstack_failures(report.get("openstack"))
    mismatches = (report.get("status_agrees_with_lab") or {}).get("mismatches", [])
    if mismatches:
        out.append(f"status vs lab: {len(mismatches)} mismatch(es)")
    return out


def _openstack_failures(os_report: dict[str, Any] | None) -> list[str]:
    """What failed of the real-OpenStack checks (`_openstack_after`'s report)."""
    if not os_report:
        return []
    out = [
        f"{svc}: schema {sc['version']} is behind {sc['code']}"
        for svc, sc in os_report.get("schemas", {}).items()
        if not sc["at_head"]
    ]
    for target, c in sorted(os_report.get("client", {}).items()):
        # a report without the count (written before windows were told apart): every failure
        unannounced = c.get("outside_windows", c["failed"])
        if unannounced:
            out.append(
                f"openstack client, {target}: {unannounced} of {c['calls']} calls failed "
                "outside the announced windows"
            )
    seed = os_report.get("seed")
    if seed is not None and not seed["kept"]:
        out.append(f"seeded resources: {len(seed['missing'])} missing")
    tempest = os_report.get("tempest")
    if tempest is not None and not tempest["ok"]:
        out.append(
            f"tempest: {tempest['passed']} passed, {tempest['failed']} failed, "
            f"{tempest['skipped']} skipped"
        )
    return out


def say_failed_checks(failures: list[str]) -> None:
    """Each failed check on stderr, where the demo's verdict goes."""
    for line in failures:
        err_console.print(Text.assemble(("check failed:", "bold red"), " ", line), soft_wrap=True)
