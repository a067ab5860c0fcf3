"""The lab supervisor: parent and reaper of every lab process, the lab's systemd.

Runs detached (`python -m stepwise.lab.supervisor LAB_DIR`), answers JSON requests on an
abstract Unix socket, restarts units that exit while wanted (Restart=always, 1 s: the restart
loop), records every PID in `run/pids.json` so `lab down` can end them even if this process
died, and polls its children so none stays a zombie.
"""

from __future__ import annotations

import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from stepwise.lab import rabbitmq, registry
from stepwise.lab.nodes import ENV_LAB, ENV_NODE, Lab, write_json

RESTART_SEC = 1.0
LAB_NODE = "_lab"  # pseudo-node of lab-wide processes (the VIP HAProxy)


class Proc:
    """One unit: what is wanted of it and the process that currently runs it."""

    def __init__(self, node: str, unit: str):
        self.node, self.unit = node, unit
        self.popen: subprocess.Popen | None = None
        self.wanted = False
        self.restarts = 0
        self.last_exit: int | None = None
        self.restart_at: float | None = None
        self.stop_failed = False
        self.lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def state(self) -> str:
        if self.alive:
            return "deactivating (stop-sigterm, timed out)" if self.stop_failed else "active"
        if self.wanted:
            return "activating (auto-restart)"
        return "failed" if self.last_exit not in (None, 0, -15, -9) else "inactive"


class Supervisor:
    def __init__(self, lab: Lab):
        self.lab = lab
        self.procs: dict[tuple[str, str], Proc] = {}
        self.lock = threading.RLock()
        self.down: set[str] = set()
        self.quit = threading.Event()
        (lab.run_dir / "units").mkdir(parents=True, exist_ok=True)
        (lab.run_dir / "down").mkdir(parents=True, exist_ok=True)

    # --- processes ----------------------------------------------------------------------
    def proc(self, node: str, unit: str) -> Proc:
        with self.lock:
            return self.procs.setdefault((node, unit), Proc(node, unit))

    def command(self, node: str, unit: str) -> list[str]:
        if node == LAB_NODE and unit == registry.UNIT:
            return registry.command(self.lab)
        if node == LAB_NODE and unit == rabbitmq.EPMD_UNIT:
            return rabbitmq.epmd_command(self.lab)
        if node == LAB_NODE:
            return ["haproxy", "-db", "-f", str(self.lab.dir / "haproxy" / "haproxy.cfg")]
        return [
            self.lab.spec.python,
            "-m",
            "stepwise.lab.svcproc",
            str(self.lab.dir),
            node,
            unit,
        ]

    def spawn(self, p: Proc) -> None:
        log = self.lab.log_dir / p.node / f"{p.unit}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = self.lab.node_env(p.node)
        with open(log, "ab") as fh:
            fh.write(f"--- start {time.strftime('%H:%M:%S')}\n".encode())
            fh.flush()
            # Own session: a node crash kills the unit's whole group (mariadbd under its wrapper).
            p.popen = subprocess.Popen(
                self.command(p.node, p.unit),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=str(self.lab.dir),
                start_new_session=True,
            )
        p.stop_failed = False
        p.last_exit = None
        self.record_pids()

    def record_pids(self) -> None:
        with self.lock:
            pids = {
                str(p.popen.pid): {"node": p.node, "unit": p.unit}
                for p in self.procs.values()
                if p.popen is not None and p.popen.poll() is None
            }
        write_json(self.lab.pids_file, pids)

    def wait_ready(self, p: Proc, timeout: float) -> tuple[bool, str]:
        if p.node == LAB_NODE:
            time.sleep(0.2)
            return p.alive, "started"
        deadline = time.monotonic() + timeout
        f = self.lab.unit_file(p.node, p.unit)
        while time.monotonic() < deadline:
            if p.popen is None or p.popen.poll() is not None:
                return False, self.last_log(p)
            try:
                if json.loads(f.read_text()).get("pid") == p.popen.pid:
                    return True, "started"
            except (FileNotFoundError, ValueError):
                pass
            time.sleep(0.05)
        return False, "start timed out"

    def last_log(self, p: Proc) -> str:
        try:
            lines = (self.lab.log_dir / p.node / f"{p.unit}.log").read_text().strip().splitlines()
            return lines[-1] if lines else "exited"
        except OSError:
            return "exited"

    # --- operations ---------------------------------------------------------------------
    def start(self, node: str, unit: str, wait: bool = True) -> dict[str, Any]:
        if node in self.down:
            return {"ok": False, "message": f"node {node} is down"}
        p = self.proc(node, unit)
        with p.lock:
            p.wanted = True
            running = p.alive
            if not running:
                p.restart_at = None
                self.spawn(p)
        if not wait:
            return {"ok": True, "message": "already running" if running else "starting"}
        # a unit still starting (a node's boot starts its units without waiting) is waited
        # for, as `systemctl start` joins the start job in progress: answering at once let a
        # `pcs node unstandby` right after a reboot find no cluster running on the node
        svc = self.lab.spec.services.get(unit)
        own = svc.start_timeout if svc and svc.start_timeout is not None else 30.0
        ok, msg = self.wait_ready(p, float(own) + float(self.lab.spec.start_delay))
        if ok and running:
            msg = "already running"
        return {"ok": ok, "message": msg, "state": p.state()}

    def stop_timeout(self, unit: str) -> float:
        """systemd's TimeoutStopSec: the lab's short one, or the unit's own from the spec (real
        services and Galera members finish their work in progress first)."""
        svc = self.lab.spec.services.get(unit)
        own = svc.stop_timeout if svc else None
        return float(own if own is not None else self.lab.spec.stop_timeout)

    def stop(self, node: str, unit: str) -> dict[str, Any]:
        p = self.proc(node, unit)
        with p.lock:
            p.wanted = False
            p.restart_at = None
            if not p.alive:
                return {"ok": True, "message": "not running"}
            p.popen.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            try:
                p.popen.wait(self.stop_timeout(unit))  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                p.stop_failed = True
                return {
                    "ok": False,
                    "message": f"Job for {unit}.service failed because a timeout was exceeded "
                    "(the process is still running)",
                }
            self.exited(p)
        return {"ok": True, "message": "stopped"}

    def kill(self, node: str, unit: str) -> dict[str, Any]:
        p = self.proc(node, unit)
        with p.lock:
            p.wanted = False
            p.restart_at = None
            if p.alive:
                self.killpg(p)
        return {"ok": True, "message": "killed"}

    def killpg(self, p: Proc) -> None:
        try:
            os.killpg(p.popen.pid, signal.SIGKILL)  # type: ignore[union-attr]
        except ProcessLookupError:
            pass
        try:
            p.popen.wait(10)  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            pass
        self.exited(p)

    def exited(self, p: Proc) -> None:
        rc = p.popen.poll() if p.popen else None
        p.last_exit = rc
        try:
            f = self.lab.unit_file(p.node, p.unit)
            if p.popen is not None and json.loads(f.read_text()).get("pid") == p.popen.pid:
                f.unlink()
        except (FileNotFoundError, ValueError):
            pass
        self.record_pids()

    def restart(self, node: str, unit: str, only_if_running: bool = False) -> dict[str, Any]:
        p = self.proc(node, unit)
        if only_if_running and not p.wanted:
            return {"ok": True, "message": "not running", "restarted": False}
        res = self.stop(node, unit)
        if not res["ok"]:
            # The old process keeps its port: the new version cannot start beside it.
            p.wanted = True
            res2 = self.start(node, unit)
            return {**res2, "ok": False, "message": res["message"] + "; " + res2["message"]}
        out = self.start(node, unit)
        out["restarted"] = True
        return out

    def signal_unit(self, node: str, unit: str, sig: int) -> dict[str, Any]:
        p = self.proc(node, unit)
        if not p.alive:
            return {"ok": False, "message": f"{unit} is not running"}
        p.popen.send_signal(sig)  # type: ignore[union-attr]
        return {"ok": True, "message": "signalled"}

    def poweroff(self, node: str, down: bool = False) -> dict[str, Any]:
        """Every process of the node dies at once (reboot, crash); wanted-ness is forgotten."""
        with self.lock:
            procs = [p for (n, _), p in self.procs.items() if n == node]
        for p in procs:
            with p.lock:
                p.wanted = False
                p.restart_at = None
                if p.alive:
                    self.killpg(p)
                p.last_exit = None  # a fresh boot: nothing "failed" before it
        if down:
            self.down.add(node)
            (self.lab.run_dir / "down" / node).write_text("down")
        return {"ok": True, "message": f"{node} powered off"}

    def boot(self, node: str, units: list[str], wait: bool = True) -> dict[str, Any]:
        """Start the node's units at once; with `wait`, until each is ready (or failed)."""
        self.down.discard(node)
        (self.lab.run_dir / "down" / node).unlink(missing_ok=True)
        results = {}
        threads = []

        def one(u: str) -> None:
            results[u] = self.start(node, u, wait=wait)

        for u in units:
            t = threading.Thread(target=one, args=(u,))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        return {"ok": True, "message": f"{node} booted", "units": results}

    def status(self) -> dict[str, Any]:
        with self.lock:
            items = list(self.procs.values())
        return {
            "ok": True,
            "down": sorted(self.down),
            "units": [
                {
                    "node": p.node,
                    "unit": p.unit,
                    "state": p.state(),
                    "pid": p.popen.pid if p.alive else None,
                    "restarts": p.restarts,
                    "wanted": p.wanted,
                }
                for p in items
            ],
        }

    def shutdown(self) -> dict[str, Any]:
        with self.lock:
            procs = list(self.procs.values())
        for p in procs:
            p.wanted = False
            if p.alive:
                try:
                    os.killpg(p.popen.pid, signal.SIGKILL)  # type: ignore[union-attr]
                except ProcessLookupError:
                    pass
        for p in procs:
            if p.popen is not None:
                try:
                    p.popen.wait(10)
                except subprocess.TimeoutExpired:
                    pass
        self.record_pids()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    time.sleep(0.05)
            except ChildProcessError:
                break
        self.quit.set()
        return {"ok": True, "message": "lab stopped"}

    # --- reaper / restart loop ------------------------------------------------------------
    def monitor(self) -> None:
        while not self.quit.is_set():
            now = time.monotonic()
            with self.lock:
                items = list(self.procs.values())
            for p in items:
                if not p.lock.acquire(blocking=False):
                    continue
                try:
                    if p.popen is not None and p.popen.poll() is not None and p.last_exit is None:
                        self.exited(p)
                        if p.wanted:
                            p.restart_at = now + RESTART_SEC
                    if (
                        p.wanted
                        and not p.alive
                        and p.restart_at is not None
                        and now >= p.restart_at
                        and p.node not in self.down
                    ):
                        p.restarts += 1
                        p.restart_at = None
                        p.last_exit = None
                        self.spawn(p)
                    elif p.alive:
                        p.last_exit = None
                finally:
                    p.lock.release()
            self.reap_orphans()
            self.quit.wait(0.2)

    def reap_orphans(self) -> None:
        """Reap processes re-parented to us (we are a subreaper) that are not our Popen children."""
        with self.lock:
            ours = {p.popen.pid for p in self.procs.values() if p.popen is not None}
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid in ours:
                return
            try:
                os.waitpid(info.si_pid, os.WNOHANG)
            except ChildProcessError:
                return

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        op = req.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid()}
        if op == "start":
            return self.start(req["node"], req["unit"], req.get("wait", True))
        if op == "stop":
            return self.stop(req["node"], req["unit"])
        if op == "kill":
            return self.kill(req["node"], req["unit"])
        if op == "restart":
            return self.restart(req["node"], req["unit"], req.get("only_if_running", False))
        if op == "reload":
            return self.signal_unit(req["node"], req["unit"], signal.SIGHUP)
        if op == "poweroff":
            return self.poweroff(req["node"], req.get("down", False))
        if op == "boot":
            return self.boot(req["node"], req.get("units", []), req.get("wait", True))
        if op == "status":
            return self.status()
        if op == "shutdown":
            return self.shutdown()
        return {"ok": False, "message": f"unknown op {op!r}"}


def _become_subreaper() -> None:
    # Orphans of our units (a mariadbd whose wrapper was killed) come to us, not to an init
    # that may never reap them: no zombies.
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def serve(lab_dir: str) -> None:
    lab = Lab(lab_dir)
    sup = Supervisor(lab)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            line = self.rfile.readline()
            try:
                res = sup.handle(json.loads(line))
            except Exception as exc:  # noqa: BLE001 - a bad request must not kill the lab
                res = {"ok": False, "message": f"supervisor error: {exc}"}
            self.wfile.write(json.dumps(res).encode() + b"\n")

    class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
        daemon_threads = True
        # every node boots at once and its commands call in concurrently: the default
        # backlog of 5 refused connections ("Resource temporarily unavailable") on 16 nodes
        request_queue_size = 256

    _become_subreaper()
    server = Server(lab.socket_name, Handler)
    lab.supervisor_pid_file.write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=sup.shutdown).start())
    threading.Thread(target=sup.monitor, daemon=True).start()
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True
    ).start()
    sup.quit.wait()
    time.sleep(0.2)  # let the shutdown answer reach its caller
    server.server_close()


if __name__ == "__main__":
    os.environ[ENV_LAB] = str(Path(sys.argv[1]).resolve())
    os.environ.setdefault(ENV_NODE, LAB_NODE)
    serve(sys.argv[1])
