"""The process of one lab unit: a service on a node (real code, a database member, a
stand-in), a workload or a router. Started by the lab supervisor as
`python -m stepwise.lab.svcproc LAB_DIR NODE UNIT`.

The unit's kind (stepwise.lab.kinds) starts it: a service refuses to start on a config
rendered for another release or on a schema older than its code (it exits, the supervisor
restarts it: the restart loop). Running, it answers HTTP on its node address; the answer is
its health as its kind judges it, so HAProxy and the probe see what an operator would. This
module is what every kind shares: the health server, its graceful drain, and the signals
(SIGTERM stops as the real service stops, SIGHUP reloads).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from stepwise.lab import health as lab_health
from stepwise.lab.handover import take_new_connections
from stepwise.lab.kinds import ROUTER, WORKLOAD, LabKind, kind_of
from stepwise.lab.nodes import Lab
from stepwise.lab.unit import Unit, fail


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

    def server_activate(self) -> None:
        super().server_activate()
        if self._reuse_port:
            take_new_connections(self.socket)  # the group exists once we listen


def cached_health(unit: Unit, kind: LabKind) -> tuple[bool, str]:
    """The unit's health as its kind judges it, asked at most every 250 ms (HAProxy's checks
    and the probe ask often; the answer reads other units' state files)."""
    now = time.monotonic()
    if now - unit.cache[0] >= 0.25:
        unit.cache = (now, kind.health(unit))
    return unit.cache[1]


def make_handler(unit: Unit, kind: LabKind):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            ok, why = cached_health(unit, kind)
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
        if self.cluster in lab_health.LEAVE_ON_STOP:
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
        kind_of(unit.lab, unit.name).reload(unit)


def _stop_child_and_exit(unit: Unit) -> None:
    """Stop the unit's child (mariadbd, uWSGI) gracefully, killed after 20 s, and exit 0."""
    if unit.child is not None and unit.child.poll() is None:
        unit.child.terminate()
        try:
            unit.child.wait(20)
        except subprocess.TimeoutExpired:
            unit.child.kill()
    os._exit(0)


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


def main(argv: list[str]) -> None:
    """Start the unit as its kind starts it (real code, a database member, a stand-in, a
    workload, a router), then answer its health on its address until it is stopped."""
    lab_dir, node, name = argv[:3]
    lab = Lab(lab_dir)
    unit = Unit(lab, node, name)
    kind = kind_of(lab, name)
    signals = _Signals(unit)
    signal.signal(signal.SIGTERM, signals.on_term)
    if kind.reloads:
        signal.signal(signal.SIGHUP, signals.on_hup)
    if kind.name not in (ROUTER, WORKLOAD):
        signals.cluster = lab.service(name).cluster
    # a kind whose own server answers on the unit's port (uWSGI) never returns from start
    addr, port, reuse = kind.start(unit)
    try:
        server = _Server((addr, port), make_handler(unit, kind), reuse_port=reuse)
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
