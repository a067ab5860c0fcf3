"""The availability probe: real requests through every VIP and to every workload, recorded.

Loopback only. It samples until it is stopped; its bounds in time and count are a safety cap
only, and a probe that reaches one before it is stopped says so (`stopped_early`), which
`failed` counts as a failure: a run's tail it did not see is never reported as "0 failed".
Downtime of a target is the sum of its outage windows: from the first failed request to the
next successful one.

A lab that runs real OpenStack (`openstack` in its spec) is also probed by a real client
(`openstack/client.py`): its `client:*` records join the `vip:*` ones when the probe stops.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepwise.lab.kinds import kind_named
from stepwise.lab.nodes import Lab

#: the safety cap on a probe's time (the client probe's own): longer than any lab run
MAX_SECONDS = 4 * 3600.0
MAX_REQUESTS = 1_000_000
#: seconds a request may take. An answer that comes late is an answer: a loaded 2-core machine
#: (a real-OpenStack lab beside other scenarios, CI) made a healthy service answer through
#: HAProxy in over 1 s, then over 2.5 s, and each such request counted as downtime. A service
#: that is down is not slow: HAProxy answers 503 at once when no server is up and retries a
#: refused connect on another, so a long bound costs nothing there. A failed request is judged
#: against the announced windows by its whole span, from its start to its answer or timeout
#: (observe/windows.py)
TIMEOUT = 10.0


@dataclass
class Target:
    name: str
    kind: str  # http | mysql
    host: str
    port: int
    path: str = "/"


def targets(lab: Lab) -> list[Target]:
    """Every VIP frontend, every workload and every workload's floating IP of the lab."""
    out = []
    for name, vip in lab.spec.vips.items():
        svc = lab.service(name)
        if kind_named(svc.kind).protocol == "mysql":
            out.append(Target(f"vip:{name}", "mysql", vip.address, vip.port))
        else:
            out.append(Target(f"vip:{name}", "http", vip.address, vip.port, svc.health_path))
    for vm, w in lab.spec.workloads.items():
        out.append(Target(f"workload:{vm}", "http", w.address, w.port))
    # the workloads as their users reach them: through their router's floating IP
    for r in lab.spec.routers.values():
        out.append(Target(f"fip:{r.workload}", "http", r.fip, r.port))
    for t in out:
        if not t.host.startswith("127."):
            raise ValueError(f"probe target {t.name} is not on loopback")
    return out


def request(t: Target) -> tuple[bool, str]:
    """One real request: an HTTP GET, or a MySQL handshake through the DB VIP."""
    if t.kind == "mysql":
        try:
            with socket.create_connection((t.host, t.port), timeout=TIMEOUT) as s:
                s.settimeout(TIMEOUT)
                head = s.recv(5)
            if len(head) == 5 and head[4] == 0x0A:
                return True, "ok"
            return False, "no MySQL greeting" if not head else "MySQL error packet"
        except OSError as e:
            return False, str(e)
    try:
        with urllib.request.urlopen(f"http://{t.host}:{t.port}{t.path}", timeout=TIMEOUT) as r:
            r.read()
            return r.status == 200, str(r.status)
    except urllib.error.HTTPError as e:
        return False, f"HTTP {e.code}{_why(e)}"
    except OSError as e:
        return False, str(getattr(e, "reason", e))


def _why(error: urllib.error.HTTPError) -> str:
    """What the failed answer says of itself: a lab service answers its node and the reason it
    is unhealthy (`": controller-0: database unreachable"`); HAProxy's own 503 says nothing."""
    try:
        body = json.loads(error.read(4096) or b"{}")
    except (OSError, ValueError):
        return ""
    if not isinstance(body, dict) or not body.get("reason"):
        return ""
    return f": {body.get('node', '?')}: {str(body['reason'])[:200]}"


def timed_request(t: Target) -> tuple[bool, str, float]:
    """`request` and how long it took (milliseconds)."""
    start = time.perf_counter()
    ok, detail = request(t)
    return ok, detail, round((time.perf_counter() - start) * 1000, 1)


def per_second(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Probe records aggregated per target per second: {target, t, requests, failed, max_ms},
    the plain records a run's store keeps (the report draws them; raw ones are 5x more)."""
    acc: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        key = (r["target"], int(r["t"]))
        a = acc.setdefault(
            key,
            {"target": r["target"], "t": float(key[1]), "requests": 0, "failed": 0, "max_ms": 0.0},
        )
        a["requests"] += 1
        a["failed"] += 0 if r["ok"] else 1
        a["max_ms"] = max(a["max_ms"], float(r.get("ms") or 0.0))
    return sorted(acc.values(), key=lambda a: (a["t"], a["target"]))


@dataclass
class Probe:
    """Probe a lab at `rate` rounds per second until stopped. `max_seconds` (at most
    MAX_SECONDS) and MAX_REQUESTS are a safety cap: a probe that reaches one before `stop`
    stops sampling and records why in `stopped_early`."""

    lab: Lab
    rate: float = 5.0
    max_seconds: float = MAX_SECONDS
    out: Path | None = None
    records: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rate = min(max(self.rate, 0.1), 50.0)
        self.max_seconds = min(self.max_seconds, MAX_SECONDS)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.targets = targets(self.lab)
        self.t0 = 0.0
        self.stopped_early: str | None = None

    def _client_probe(self) -> Any:
        # imported here: node commands import this module and must start fast
        from stepwise.lab.openstack.client import client_probe_for_lab

        return client_probe_for_lab(self.lab, self.max_seconds)

    def run(self, until: float | None = None) -> None:
        """Sample until stopped, or for `until` seconds when given (`lab probe --duration`:
        its end is the one asked for, not an early stop)."""
        self.t0 = time.time()
        planned = self.max_seconds if until is None else min(until, self.max_seconds)
        period = 1.0 / self.rate
        client = self._client_probe()
        fh = open(self.out, "a") if self.out else None
        pool = ThreadPoolExecutor(max_workers=min(16, max(1, len(self.targets))))
        try:
            if client is not None:
                client.start()
            nxt = time.monotonic()
            while (
                not self._stop.is_set()
                and time.time() - self.t0 < planned
                and len(self.records) + len(self.targets) <= MAX_REQUESTS
            ):
                now = time.time()
                for t, (ok, detail, ms) in zip(
                    self.targets, pool.map(timed_request, self.targets), strict=True
                ):
                    rec = {
                        "t": round(now, 3),
                        "target": t.name,
                        "ok": ok,
                        "detail": detail,
                        "ms": ms,
                    }
                    self.records.append(rec)
                    if fh:
                        fh.write(json.dumps(rec) + "\n")
                nxt += period
                self._stop.wait(max(0.0, nxt - time.monotonic()))
            asked_end = until is not None and time.time() - self.t0 >= until
            if not self._stop.is_set() and not asked_end:
                self.stopped_early = (
                    f"sampling stopped early, {time.time() - self.t0:.0f} s after it started "
                    f"({len(self.records)} requests): a safety cap of {self.max_seconds:.0f} s "
                    f"or {MAX_REQUESTS} requests"
                )
        finally:
            pool.shutdown()
            if client is not None:
                self._merge_client(client, fh)
            if fh:
                fh.close()

    def _merge_client(self, client: Any, fh: Any) -> None:
        """Stop the client probe and add its records (also to `out`); its file is then removed."""
        recs = client.stop()[: max(0, MAX_REQUESTS - len(self.records))]
        self.records.extend(recs)
        if fh:
            for rec in recs:
                fh.write(json.dumps(rec) + "\n")
        client.out.unlink(missing_ok=True)

    def start(self) -> Probe:
        self._thread = threading.Thread(target=self.run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        if self._thread:
            self._thread.join(60)  # the client probe may take its grace time to clean up
        return self.summary()

    def summary(self) -> dict[str, Any]:
        """`summarize` of the records so far, with whether sampling stopped early."""
        return summarize(self.records, self.stopped_early)

    def __enter__(self) -> Probe:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def summarize(records: list[dict[str, Any]], stopped_early: str | None = None) -> dict[str, Any]:
    """Per target: requests, failed, downtime (outage windows) and the longest outage; and
    `stopped_early`, why the probe stopped sampling before it was stopped (None: it did not)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(r["target"], []).append(r)
    out: dict[str, Any] = {}
    for name, recs in sorted(by.items()):
        recs.sort(key=lambda r: r["t"])
        down = longest = 0.0
        start = None
        for r in recs:
            if not r["ok"] and start is None:
                start = r["t"]
            elif r["ok"] and start is not None:
                down += r["t"] - start
                longest = max(longest, r["t"] - start)
                start = None
        if start is not None:
            tail = recs[-1]["t"] - start
            down += tail
            longest = max(longest, tail)
        failed = [r for r in recs if not r["ok"]]
        out[name] = {
            "requests": len(recs),
            "failed": len(failed),
            "downtime_s": round(down, 2),
            "longest_outage_s": round(longest, 2),
            "first_error": failed[0]["detail"] if failed else None,
        }
    total = {
        "requests": sum(v["requests"] for v in out.values()),
        "failed": sum(v["failed"] for v in out.values()),
    }
    return {"targets": out, "total": total, "stopped_early": stopped_early}


def failed(summary: dict[str, Any], prefix: str = "") -> dict[str, int]:
    """Targets (optionally only those starting with `prefix`) that had failed requests; a
    probe that stopped sampling early fails every check (`probe: <why>`): it did not see the
    end of what it watched."""
    out = {
        k: v["failed"]
        for k, v in summary["targets"].items()
        if k.startswith(prefix) and v["failed"]
    }
    if summary.get("stopped_early"):
        out[f"probe: {summary['stopped_early']}"] = 1
    return out
