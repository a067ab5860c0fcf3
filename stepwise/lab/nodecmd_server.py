"""A lab's node-command server: the node commands' code imported once, a child forked per call.

A node command (docs/node-commands.md) did a few milliseconds of work after ~0.1 s of CPU
spent starting Python and importing the lab's code, and Ansible's tasks call them by the
thousand (a controller's visit ~114 times): a third of a lab run's CPU on 2 cores. This
process imports that code at `lab up` and waits on an abstract Unix socket; the node
command's entry (`write_bin`) is a small client (`ansible_plugins/nodecmd_client`) that
passes its argv, environment, working directory and standard streams (as file descriptors).
The server forks; the child takes the caller's streams, environment and directory and runs
the same `nodecmd.main` the entry would have run; the server sends the child's exit status
back. The command runs the same code with the same inputs: only the start-up is shared.

The same server, started with `openstack` (`openstack/client_server.py`, in the lab's client
venv), runs the real `openstack` CLI the same way: python-openstackclient and its command
modules imported once (~0.9 s of CPU a call otherwise), each call its own forked `main`; with
`module` (`module_server.py`, under the nodes' interpreter) it runs Ansible's module runs.

The child watches its caller: when the caller dies (an Ansible task killed, a run SIGKILLed)
the child gets SIGTERM, as a command in the caller's process group would. Without a server
(not started, killed, or STEPWISE_LAB_NODECMD_SERVER=0) the entry runs the command itself.

    python -m stepwise.lab.nodecmd_server LAB_DIR NAME [openstack | module ANSIBLE_DIR]
    (abstract socket "\\0" NAME)
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any

# the protocol's words are the client's (one definition of both halves)
from stepwise.lab.ansible_plugins.nodecmd_client.stepwise_nodecmd_client import ACK, MAGIC
from stepwise.lab.module_server import PRELOAD as MODULE_STDLIB

#: the largest request taken (argv and environment): far above any Ansible task's
MAX_REQUEST = 4 * 1024 * 1024

#: what node commands import only when they need it: imported once here instead of per call
PRELOAD = (
    "json",
    "subprocess",
    "urllib.request",
    "urllib.error",
    "http.client",
    "configparser",
    "hashlib",
    "tempfile",
    "shlex",
    "stepwise.lab.nodecmd",
    "stepwise.lab.nodecmd_cluster",
    "stepwise.lab.nodecmd_containers",
    "stepwise.lab.nodecmd_files",
    "stepwise.lab.nodecmd_galera",
    "stepwise.lab.nodecmd_pacemaker",
    "stepwise.lab.nodecmd_packages",
    "stepwise.lab.nova",
    "stepwise.lab.openstack.bootstrap",
)


#: what the `openstack` CLI imports for the commands the catalog's tasks run (compute services
#: and servers, networks and agents, routers; the rest is imported by the call that needs it)
OPENSTACK_PRELOAD = (
    "openstackclient.shell",
    "openstackclient.common.clientmanager",
    "openstackclient.compute.client",
    "openstackclient.compute.v2.server",
    "openstackclient.compute.v2.service",
    "openstackclient.network.client",
    "openstackclient.network.v2.network",
    "openstackclient.network.v2.network_agent",
    "openstackclient.network.v2.router",
    "openstackclient.identity.client",
    "openstackclient.image.client",
    "openstack.connection",
    "keystoneauth1.session",
    "keystoneauth1.identity.generic.password",
)


#: the standard library an Ansible module run imports (`module_server`; its module_utils are
#: imported by the warm-up)
MODULE_PRELOAD = (*MODULE_STDLIB, "stepwise.lab.module_server")


def _nodecmd_main() -> None:
    from stepwise.lab.nodecmd import main

    main()


def _openstack_warm() -> None:
    """Build the CLI's shell once: its command groups' entry points are then cached in this
    process (stevedore's cache), as the modules are, for every child."""
    from openstackclient.shell import OpenStackShell

    OpenStackShell()


def _openstack_main() -> None:
    from cliff.app import App
    from openstackclient.shell import main

    # cliff names the program after sys.argv[0] when it is imported (here: in the server)
    App.NAME = os.path.splitext(os.path.basename(sys.argv[0]))[0]

    # the CLI's status is main's return value (a subprocess would exit with it)
    raise SystemExit(main(sys.argv[1:]))


def _module_warm(installed: str) -> None:
    from stepwise.lab.module_server import warm

    warm(installed)


def _module_main() -> None:
    from stepwise.lab.module_server import run_wrapper

    run_wrapper()


#: what a server runs: its modules to import once, what else to do once (or None: it is
#: given the server's arguments after its kind), the call's entry in the child
KINDS = {
    "nodecmd": (PRELOAD, None, _nodecmd_main),
    "openstack": (OPENSTACK_PRELOAD, _openstack_warm, _openstack_main),
    "module": (MODULE_PRELOAD, _module_warm, _module_main),
}


def preload(names: tuple[str, ...] = PRELOAD) -> None:
    """Import what the calls run (a module that fails to import is left to the call that
    needs it, which reports the error as it always did)."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the command that needs it says why
            pass


class Request:
    """One call: the caller's working directory, argv and environment."""

    def __init__(self, body: bytes) -> None:
        parts = body.split(b"\0")
        argc = int(parts[1])
        self.cwd = os.fsdecode(parts[0])
        self.argv = [os.fsdecode(a) for a in parts[2 : 2 + argc]]
        self.env: dict[str, str] = {}
        for item in parts[2 + argc :]:
            key, sep, value = item.partition(b"=")
            if sep:
                self.env[os.fsdecode(key)] = os.fsdecode(value)


def read_request(conn: socket.socket) -> tuple[Request, list[int]] | None:
    """The request and the caller's three stream descriptors; None for anything malformed
    (its descriptors closed)."""
    conn.settimeout(10)
    fds: list[int] = []
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
        while len(data) < len(MAGIC) + 4:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        size = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
        if not data.startswith(MAGIC) or size > MAX_REQUEST or len(fds) != 3:
            raise ValueError("not a node-command request")
        body = data[len(MAGIC) + 4 :]
        while len(body) < size:
            chunk = conn.recv(min(65536, size - len(body)))
            if not chunk:
                raise ValueError("request cut short")
            body += chunk
        return Request(body), fds
    except (OSError, ValueError, IndexError):
        for fd in fds:
            os.close(fd)
        return None
    finally:
        conn.settimeout(None)


def exit_code(exc: SystemExit) -> int:
    """The status a Python process exits with for `sys.exit(code)`."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _watch_caller(conn: socket.socket) -> None:
    """SIGTERM this child when its caller goes away (the caller never writes after its
    request: end of stream means it died)."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _run_child(
    conn: socket.socket, req: Request, fds: list[int], inherited: list[Any], entry: Any
) -> None:
    """In the forked child: become the caller's command, run it, exit with its status."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for thing in inherited:
            thing.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
        sys.stderr = open(  # noqa: SIM115
            2, "w", encoding="utf-8", errors="backslashreplace", closefd=False, buffering=1
        )
        os.environ.clear()
        os.environ.update(req.env)
        sys.argv = req.argv
        try:
            os.chdir(req.cwd)
        except OSError:
            pass
        threading.Thread(target=_watch_caller, args=(conn,), daemon=True).start()
        try:
            entry()
            code = 0
        except SystemExit as exc:
            code = exit_code(exc)
        except KeyboardInterrupt:
            code = 130
        except BaseException:  # noqa: BLE001 - a command's crash is its caller's to see
            traceback.print_exc()
            code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed pipe: nothing more to say
                pass
        os._exit(code)


class Server:
    """The accept loop: fork a child per request, send each child's status when it exits."""

    def __init__(self, name: str, entry: Any = _nodecmd_main) -> None:
        self.entry = entry
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(name)
        self.listener.listen(256)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ)
        #: pidfd -> (child pid, the caller's connection)
        self.children: dict[int, tuple[int, socket.socket]] = {}

    def serve_forever(self) -> None:
        while True:
            for key, _ in self.selector.select():
                if key.fileobj is self.listener:
                    self._accept()
                else:
                    self._reap(key.fd)

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        got = read_request(conn)
        if got is None:
            conn.close()
            return
        req, fds = got
        inherited: list[Any] = [self.listener, self.selector]
        inherited += [c for _, c in self.children.values()]
        try:
            pid = os.fork()
        except OSError:
            for fd in fds:
                os.close(fd)
            conn.close()  # no answer: the caller runs the command itself
            return
        if pid == 0:
            for pidfd in self.children:
                os.close(pidfd)
            _run_child(conn, req, fds, inherited, self.entry)
        # the call runs now: say so first, whatever fails below (the caller must never run
        # it a second time itself)
        try:
            conn.sendall(ACK)
        except OSError:
            pass  # the caller is gone: its child sees that and ends
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            _, status = os.waitpid(pid, 0)  # no pidfd: wait for this one here
            self._answer(conn, status)
            return
        self.children[pidfd] = (pid, conn)
        self.selector.register(pidfd, selectors.EVENT_READ)

    def _reap(self, pidfd: int) -> None:
        self.selector.unregister(pidfd)
        pid, conn = self.children.pop(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        self._answer(conn, status)

    @staticmethod
    def _answer(conn: socket.socket, status: int) -> None:
        code = os.waitstatus_to_exitcode(status)
        try:
            conn.sendall(code.to_bytes(4, "big", signed=True))
        except OSError:
            pass
        conn.close()


def main(argv: list[str]) -> None:
    _lab_dir, name, *kind = argv
    names, warm, entry = KINDS[kind[0] if kind else "nodecmd"]
    # `-m` put the working directory (the lab's) first on the path: nothing to import there
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
    preload(names)
    if warm is not None:
        try:
            warm(*kind[1:])
        except Exception:  # noqa: BLE001 - each call does it again and says what fails
            pass
    server = Server("\0" + name, entry)  # abstract: no path-length limit, nothing left on disk
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
