"""Real OpenStack code serving an API: uWSGI running the installed release's venv (from PyPI
under the branch's upper-constraints), the unit's own port answered by uWSGI itself.

As on a real node, the package step swaps the code and the config step renders the WSGI file
that names it; the lab keeps one rule of its own: a WSGI file rendered for another release
than the installed one refuses to start (new code on old configuration: the restart loop a
package update causes until the configuration is applied).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING, NoReturn

from stepwise.lab.kinds import REAL, LabKind, register
from stepwise.lab.openstack import config as openstack_config
from stepwise.lab.openstack import releases
from stepwise.lab.openstack.process import installed_release
from stepwise.lab.unit import Unit, fail

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

#: how long uWSGI may take to answer after its start (a loaded machine's keystone is slow)
ANSWER_SECONDS = 90


def _wait_answering(unit: Unit, url: str) -> None:
    """Until uWSGI answers `url` with anything but a server error; fails if it exits first or
    does not answer within ANSWER_SECONDS (then it is killed)."""
    deadline = time.monotonic() + ANSWER_SECONDS
    while True:
        if unit.child.poll() is not None:
            log = openstack_config.paths(unit.lab, unit.node, unit.name)["log"]
            fail(f"{unit.name}: uwsgi exited ({unit.child.returncode}); see {log}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 500:
                    return
        except urllib.error.HTTPError as exc:
            if exc.code < 500:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            unit.child.kill()
            fail(f"{unit.name}: did not answer {url} within {ANSWER_SECONDS}s")
        time.sleep(0.2)


@register
class OpenStackApi(LabKind):
    """An OpenStack API under uWSGI (keystone, placement, glance, nova's API, neutron)."""

    name = "openstack_api"
    real = True

    def start(self, unit: Unit) -> NoReturn:
        """Run uWSGI until it ends; ending unasked is a failure (the supervisor restarts)."""
        lab, node, name = unit.lab, unit.node, unit.name
        release = installed_release(unit)
        uwsgi = shutil.which("uwsgi") or "/usr/bin/uwsgi"
        if not os.path.exists(uwsgi):
            fail("uwsgi not found: install the Debian packages uwsgi-core and uwsgi-plugin-python3")
        unit.child = subprocess.Popen(
            [uwsgi, "--ini", str(openstack_config.paths(lab, node, name)["run"])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=False,
        )
        svc = lab.service(name)
        _wait_answering(unit, f"http://{lab.node(node).address}:{svc.port}{svc.health_path}")
        unit.publish(
            real=True,
            code=f"{releases.SERVICES[name].project} {releases.version_of(release, name)}",
            release=release.label,
            venv=str(openstack_config.code_of(lab, node, name, release)),
        )
        # Not Popen.wait(): it holds the waitpid lock while blocked, and the SIGTERM handler's
        # own wait for the child could then never take it (a stop hung until its timeout).
        while unit.child.poll() is None:
            time.sleep(0.2)
        sys.exit(0 if unit.stopping else (unit.child.returncode or 1))

    def reload(self, unit: Unit) -> None:
        """uWSGI's chain reload, one worker after the other, so that one always serves (SIGHUP
        would reload them all at once: the API refuses calls meanwhile), as httpd's graceful
        restart keeps serving."""
        if not unit.child_running():
            return
        try:  # non-blocking: a FIFO nobody reads would hang the handler
            fifo = openstack_config.paths(unit.lab, unit.node, unit.name)["fifo"]
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            # nobody reads the FIFO (uWSGI's master is itself restarting): the plain reload
            unit.child.send_signal(signal.SIGHUP)
            return
        try:
            os.write(fd, b"c")
        finally:
            os.close(fd)

    def render_config(self, lab: Lab, node: str, service: str) -> bool:
        openstack_config.render(lab, node, service)
        return True

    def describe(self, lab: Lab, node: str, service: str, published: dict | None) -> str:
        release = openstack_config.release_on(lab, node, service)
        project = releases.SERVICES[service].project
        if release is None:
            return f"{project} (not installed)"
        code = (published or {}).get("code") or f"{project} {releases.version_of(release, service)}"
        from_image = (published or {}).get("venv", "").startswith(str(lab.node_root(node)))
        where = " from its container's image" if from_image else ""
        return f"{code} ({release.label}) {releases.SERVICES[service].runs}{where}"

    def components(self, lab: Lab, services: list[str], ask: bool) -> list[dict[str, str]]:
        imaged = (
            {s for s, v in lab.spec.containers.services.items() if v.series}
            if lab.spec.containers
            else set()
        )
        series = lab.spec.openstack.series if lab.spec.openstack else "?"
        rows = []
        for s in services:
            how = ", the venv in its image, run from what a node pulled" if s in imaged else ""
            detail = f"OpenStack {series} code from PyPI {releases.SERVICES[s].runs}{how}"
            rows.append({"name": s, "kind": REAL, "detail": detail})
        return rows
