"""One emulated process of a lab node: an OpenStack-like service, the database wrapper, or a
workload (an instance on a compute). Started by the lab supervisor as
`python -m stepwise.lab.svcproc LAB_DIR NODE UNIT`.

A service reads its installed version and config at start and refuses to start on a config
rendered for another release or on a schema older than its code (it exits, the supervisor
restarts it: the restart loop). Running, it answers HTTP on its node address; the answer is
its health (schema, quorum, RPC peers), so HAProxy and the probe see what an operator would.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn

from stepwise.lab import containers as C
from stepwise.lab import health as H
from stepwise.lab import podman as P
from stepwise.lab import repos as R
from stepwise.lab.nodes import Lab, write_json


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, addr, handler, reuse_port: bool = False):
        self._reuse_port = reuse_port
        super().__init__(addr, handler)

    def handle_error(self, request, client_address) -> None:
        pass  # clients (health checks, the probe) hang up early; that is not our error

    def drain(self, grace: float = 2.0) -> None:
        """Stop gracefully, as httpd's graceful-stop or oslo.service do: serve what the kernel
        already accepted, then close, then let the requests in progress finish.

        Closing the listening socket with connections in its backlog resets them; HAProxy
        has sent a request on such a connection and answers the client 502, which is an API
        failure a real service's stop does not cause.
        """
        sock = self.socket
        sock.setblocking(False)
        while True:
            try:
                conn, addr = sock.accept()
            except OSError:
                break
            conn.setblocking(True)
            self.process_request(conn, addr)
        sock.close()
        deadline = time.monotonic() + grace
        me = threading.current_thread()
        for t in threading.enumerate():
            if t is not me and "process_request" in t.name:
                t.join(max(0.0, deadline - time.monotonic()))

    def server_bind(self) -> None:
        if self._reuse_port:
            # Live migration: the destination serves the same address before the source goes.
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        super().server_bind()


def fail(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def config_path(lab: Lab, node: str, service: str):
    return lab.node_path(node, f"/etc/{service}/{service}.conf")


def read_config(lab: Lab, node: str, service: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None)
    cp.read(config_path(lab, node, service))
    return cp


class Unit:
    """State shared by the HTTP handler and the signal handlers."""

    def __init__(self, lab: Lab, node: str, name: str):
        self.lab, self.node, self.name = lab, node, name
        self.major = 0
        self.version = ""
        self.rpc_send: int | None = None
        self.cache: tuple[float, tuple[bool, str]] = (0.0, (False, "starting"))
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.extra: dict[str, Any] = {}  # what a real service's start said of its code

    def publish(self, **extra) -> None:
        data = {
            "pid": os.getpid(),
            "node": self.node,
            "unit": self.name,
            "version": self.version,
            "major": self.major,
            "rpc_send": self.rpc_send,
            "ready": True,
            "since": time.time(),
        }
        self.extra.update(extra)  # kept by later publications (a pin read on SIGHUP)
        data.update(self.extra)
        write_json(self.lab.unit_file(self.node, self.name), data)

    def health(self) -> tuple[bool, str]:
        now = time.monotonic()
        if now - self.cache[0] < 0.25:
            return self.cache[1]
        if self.name in self.lab.spec.get("routers", {}):
            res = router_health(self)
        elif self.name in self.lab.spec["workloads"]:
            res = H.storage_ok(self.lab)
        elif self.lab.service(self.name)["db"]:
            res = self.db_health()
        elif self.lab.service(self.name).get("kind"):
            res = _kind(self.lab.service(self.name)).health(self)
        else:
            res = H.service_health(self.lab, self.name, self.major)
        self.cache = (now, res)
        return res

    def db_health(self) -> tuple[bool, str]:
        # The clustercheck of a Galera node: the local member is Synced in a primary component.
        from stepwise.lab import galera

        if self.child is None or self.child.poll() is not None:
            return False, "mariadbd not running"
        return galera.clustercheck(self.lab.node_root(self.node))

    def read_pin(self) -> None:
        """The RPC version this unit sends, read at its start and on SIGHUP (`H.rpc_pin`)."""
        self.rpc_send = H.rpc_pin(self.lab, self.node, self.name, self.major)


def make_handler(unit: Unit):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            ok, why = unit.health()
            body = json.dumps(
                {
                    "node": unit.node,
                    "service": unit.name,
                    "version": unit.version,
                    "ok": ok,
                    "reason": why,
                }
            ).encode()
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_HEAD = do_GET

        def log_message(self, *args) -> None:
            pass

    return Handler


def start_service(unit: Unit) -> tuple[str, int, bool]:
    lab, node, name = unit.lab, unit.node, unit.name
    svc = lab.service(name)
    pkgs = lab.read_state(node, "packages.json", {}) or {}
    main = svc["packages"][0] if svc["packages"] else None
    if C.containerized(lab.spec, node, name):
        # the runtime stand-in: the service runs the version its container's image holds
        unit.version = P.container_version(lab, node, name) or ""
        if not unit.version:
            fail(f"{name}: no such container, or its image is not in the node's store")
        main = None
    elif main and main not in pkgs:
        fail(f"{name}: package {main} is not installed")
    else:
        unit.version = pkgs[main]["version"] if main else "1.0.0"
    # An OS-shipped package (e.g. mariadb) has no OpenStack release: it never needs new config.
    unit.major = 1 if main in R.SYSTEM_PACKAGES else R.major(unit.version)
    time.sleep(float(lab.spec.get("start_delay", 0.4)))
    cfg = read_config(lab, node, name)
    want = cfg.get("DEFAULT", "config_for", fallback="")
    if not svc["db"] and want != f"R{R.major(unit.version)}" and main not in R.SYSTEM_PACKAGES:
        fail(
            f"{name} {unit.version}: configuration is for '{want or 'nothing'}', "
            f"not R{R.major(unit.version)}: unknown options / missing required options "
            "(apply the configuration of the new version)"
        )
    if svc.get("schema"):
        v = H.schema_version(lab, svc["project"], ttl=0)
        if v is None:
            fail(f"{name}: cannot reach the database")
        if v < unit.major:
            fail(
                f"{name} {unit.version}: database schema version {v} is older than this code "
                f"({unit.major}); run '{svc['project']}-manage db sync'"
            )
    unit.read_pin()
    addr = lab.node(node)["address"]
    return addr, svc["port"], False


def start_db(unit: Unit) -> tuple[str, int, bool]:
    """mysqld_safe-like: check the datadir format, then bootstrap or join the Galera cluster."""
    from stepwise.lab import galera, mariadb

    lab, node, name = unit.lab, unit.node, unit.name
    svc = lab.service(name)
    pkgs = lab.read_state(node, "packages.json", {}) or {}
    unit.version = pkgs.get(svc["packages"][0], {}).get("version", "") if svc["packages"] else ""
    unit.major = 1
    try:
        unit.child = galera.start(
            lab,
            node,
            name,
            mariadb.installed_format(pkgs),
            on_spawn=lambda child: setattr(unit, "child", child),
        )
    except galera.StartError as exc:
        fail(str(exc))
    return lab.node(node)["address"], svc["port"], False


def start_real(unit: Unit) -> None:
    """Run real OpenStack code (uWSGI serving the installed release's venv) as this unit.

    As on a real node, the package step swaps the code and the config step renders the WSGI
    file that names it; the lab keeps one rule of its own here: a WSGI file rendered for
    another release than the installed one refuses to start (new code on old configuration:
    the restart loop a package update causes until the configuration is applied).
    """
    from stepwise.lab.openstack import config as C
    from stepwise.lab.openstack import releases as RL

    lab, node, name = unit.lab, unit.node, unit.name
    svc = lab.service(name)
    from stepwise.lab.openstack.process import installed_release

    release = installed_release(unit)
    uwsgi = shutil.which("uwsgi") or "/usr/bin/uwsgi"
    if not os.path.exists(uwsgi):
        fail("uwsgi not found: install the Debian packages uwsgi-core and uwsgi-plugin-python3")
    unit.child = subprocess.Popen(
        [uwsgi, "--ini", str(C.paths(lab, node, name)["run"])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=False,
    )
    addr = lab.node(node)["address"]
    _wait_answering(unit, f"http://{addr}:{svc['port']}{svc['health_path']}")
    unit.publish(
        real=True,
        code=f"{RL.SERVICES[name].project} {RL.version_of(release, name)}",
        release=release.label,
        venv=str(C.code_of(lab, node, name, release)),
    )


def _wait_answering(unit: Unit, url: str) -> None:
    """Until uWSGI answers `url` with anything but a server error; fails if it exits first or
    does not answer within 90 s (then it is killed)."""
    from stepwise.lab.openstack import config as C

    deadline = time.monotonic() + 90
    while True:
        if unit.child.poll() is not None:
            fail(
                f"{unit.name}: uwsgi exited ({unit.child.returncode}); "
                f"see {C.paths(unit.lab, unit.node, unit.name)['log']}"
            )
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
            fail(f"{unit.name}: did not answer {url} within 90s")
        time.sleep(0.2)


def start_router(unit: Unit) -> tuple[str, int, bool]:
    """A router's floating IP on its keepalived master (stepwise/lab/routers.py); reuse_port:
    the new master holds the address before the old one lets it go."""
    r = unit.lab.spec["routers"][unit.name]
    unit.version = "router"
    return r["fip"], r["port"], True


def router_health(unit: Unit) -> tuple[bool, str]:
    """A router forwards while its node's L3 agent runs, to the workload behind it."""
    from stepwise.lab import routers

    ok, why = routers.forwarding(unit.lab, unit.node)
    if not ok:
        return ok, why
    r = unit.lab.spec["routers"][unit.name]
    w = unit.lab.spec["workloads"][r["workload"]]
    try:
        with urllib.request.urlopen(f"http://{w['address']}:{w['port']}/", timeout=1.0) as resp:
            return resp.status == 200, f"{r['workload']} answered {resp.status}"
    except urllib.error.HTTPError as exc:
        return False, f"{r['workload']} answered {exc.code}"
    except OSError as exc:
        return False, f"{r['workload']} unreachable: {exc}"


def start_workload(unit: Unit) -> tuple[str, int, bool]:
    w = unit.lab.spec["workloads"][unit.name]
    unit.version = "vm"
    return w["address"], w["port"], True


class _Signals:
    """The unit's signal handlers: SIGTERM stops it as the real service stops (a cluster member
    leaves, the server drains), SIGHUP re-reads its RPC pin."""

    def __init__(self, unit: Unit):
        self.unit = unit
        self.cluster: str | None = None  # known once the service is started
        self.server: _Server | None = None

    def on_term(self, signum, frame) -> None:
        unit = self.unit
        lab, node, name = unit.lab, unit.node, unit.name
        faults = lab.read_state(node, "faults.json", {}) or {}
        if name in faults.get("hang_stop", []):
            return  # the fault: this service ignores its stop request and keeps its port
        unit.stopping = True
        try:
            lab.unit_file(node, name).unlink()
        except FileNotFoundError:
            pass
        if self.cluster in H.LEAVE_ON_STOP:
            with lab.node_lock(node):
                st = lab.read_state(node, "cluster.json", {}) or {}
                st.setdefault(name, {})["left"] = True
                lab.write_state(node, "cluster.json", st)
        if self.server is not None:
            # the main thread is in serve_forever's select: it never returns there
            self.server.drain()
        _stop_child_and_exit(unit)

    def on_hup(self, signum, frame) -> None:
        unit = self.unit
        unit.read_pin()
        unit.publish()
        # a real OpenStack service reloads itself (nova asks again which compute RPC version to
        # speak); the database, RabbitMQ and memcached children are not told: the stand-in's
        # reload only re-reads the pin
        svc = unit.lab.service(unit.name)
        if not svc.get("real") or unit.child is None or unit.child.poll() is not None:
            return
        if svc.get("kind"):
            unit.child.send_signal(signal.SIGHUP)  # a process: oslo.service's reload
            return
        from stepwise.lab.openstack import config as OC

        # an API: uWSGI's chain reload, one worker after the other, so that one always serves
        # (SIGHUP would reload them all at once: the API refuses calls meanwhile), as httpd's
        # graceful restart keeps serving
        try:  # non-blocking: a FIFO nobody reads would hang the handler
            fd = os.open(
                OC.paths(unit.lab, unit.node, unit.name)["fifo"], os.O_WRONLY | os.O_NONBLOCK
            )
        except OSError:
            # nobody reads the FIFO (uWSGI's master is itself restarting): the plain reload
            unit.child.send_signal(signal.SIGHUP)
            return
        try:
            os.write(fd, b"c")
        finally:
            os.close(fd)


def _stop_child_and_exit(unit: Unit) -> None:
    """Stop the unit's child (mariadbd, uWSGI) gracefully, killed after 20 s, and exit 0."""
    if unit.child is not None and unit.child.poll() is None:
        unit.child.terminate()
        try:
            unit.child.wait(20)
        except subprocess.TimeoutExpired:
            unit.child.kill()
    os._exit(0)


def _serve_real(unit: Unit) -> NoReturn:
    """Run the real service's uWSGI until it ends; ending unasked is a failure."""
    start_real(unit)
    # Not Popen.wait(): it holds the waitpid lock while blocked, and the SIGTERM handler's
    # own wait for the child could then never take it (a stop hung until its timeout).
    while unit.child.poll() is None:
        time.sleep(0.2)
    # uWSGI ended without being asked to: the unit failed (the supervisor restarts it)
    sys.exit(0 if unit.stopping else (unit.child.returncode or 1))


def _rejoin_cluster(lab: Lab, node: str, name: str) -> None:
    """A cluster member that left on its last stop is back."""
    with lab.node_lock(node):
        st = lab.read_state(node, "cluster.json", {}) or {}
        if st.get(name, {}).get("left"):
            st[name]["left"] = False
            lab.write_state(node, "cluster.json", st)


def _exit_when_child_ends(unit: Unit) -> None:
    """A child (mariadbd) that ends unasked fails the unit: exit 1, the supervisor sees it."""

    def watch() -> None:
        unit.child.wait()
        if not unit.stopping:
            os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _kind(svc: dict) -> Any:
    """The module that runs a real infrastructure service (`kind` in the spec) as a child."""
    import importlib

    return importlib.import_module(f"stepwise.lab.{svc['kind']}")


def main(argv: list[str]) -> None:
    """Start the unit (real code, database member, stand-in or workload), then answer its
    health on its address until it is stopped."""
    lab_dir, node, name = argv[:3]
    lab = Lab(lab_dir)
    unit = Unit(lab, node, name)
    signals = _Signals(unit)
    signal.signal(signal.SIGTERM, signals.on_term)
    routers = lab.spec.get("routers", {})
    own = name not in lab.spec["workloads"] and name not in routers
    if own:
        signal.signal(signal.SIGHUP, signals.on_hup)
    if own and lab.service(name).get("real") and not lab.service(name).get("kind"):
        _serve_real(unit)  # a real API: uWSGI answers on the unit's port
    if name in routers:
        addr, port, reuse = start_router(unit)
    elif name in lab.spec["workloads"]:
        addr, port, reuse = start_workload(unit)
    else:
        svc = lab.service(name)
        signals.cluster = svc.get("cluster")
        if svc.get("real"):  # a real OpenStack process: its module checks and runs it
            addr, port, reuse = _kind(svc).start(unit)
        else:
            addr, port, reuse = (start_db if svc["db"] else start_service)(unit)
        if svc.get("kind") and not svc.get("real"):
            _kind(svc).start(unit)  # the real server, as the unit's child
    try:
        server = _Server((addr, port), make_handler(unit), reuse_port=reuse)
    except OSError as exc:
        if unit.child is not None:
            unit.child.kill()
        fail(f"cannot listen on {addr}:{port}: {exc.strerror} (is an old instance still running?)")
    if signals.cluster:
        _rejoin_cluster(lab, node, name)
    unit.publish()
    if unit.child is not None:
        _exit_when_child_ends(unit)
    signals.server = server
    server.serve_forever(poll_interval=0.5)


if __name__ == "__main__":
    main(sys.argv[1:])
