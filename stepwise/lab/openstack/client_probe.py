"""The client probe: a real OpenStack user calling the cloud through its VIPs, recorded.

A standalone script run by the client venv's python (stdlib + openstacksdk/keystoneauth1; it
never imports stepwise). Until SIGTERM/SIGINT, `--max-seconds` or MAX_ROUNDS, every
`--interval` seconds it makes one round of user calls:

  client:keystone   issue a token (every `--token-every` rounds) and list projects
  client:placement  create and delete a resource provider
  client:glance     list images, create a small image with a few bytes of data, delete it
  client:nova       list every project's servers and show the first (when the cloud has nova)
  client:nova-server  every `--server-every` rounds, a small server (`--server-image`,
                    `--server-flavor`, no network) created, watched each round until ACTIVE,
                    then deleted: a record for the create, for the delete, and a failure
                    when it goes to ERROR or is not ACTIVE within SERVER_TIMEOUT (spanning
                    from its create: the create is what failed)
  client:neutron    list networks and ports (when the cloud has neutron)

and appends one JSON line per call to `--out` in the lab probe's record format:
`{"t": epoch, "target": "client:...", "ok": bool, "detail": str, "ms": float}`.

One authenticated session (password auth from clouds.yaml) is reused; keystoneauth retries a
request once after re-authenticating on a 401, and a 401 that still gets through drops the
token so the next call authenticates afresh. A failed token issue is a failed keystone call.
openstacksdk itself retries a failed connect once after 0.5 s (as every user of it sees).

Every request opens a new connection: a kept-alive one would stay pinned to one backend, and
uWSGI's `http-socket` (no keep-alive: it closes after each response without saying so) makes
a reused connection fail spuriously when the close races the next request.

Everything it creates is named `stepwise-probe-<run>-...` and is deleted, including resources
whose create answer was lost (a service stopped under the call, or the probe's own stop): found
by name once the service answers again, and swept by name on exit.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import signal
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

if __package__:
    from stepwise.lab.openstack.client_ledger import Ledger
else:  # run as a script by the client venv's python (no stepwise there): the file beside it
    from client_ledger import Ledger  # type: ignore[no-redef]

PREFIX = "stepwise-probe-"
#: seconds between rounds, and a new token every TOKEN_EVERY rounds: each call costs keystone
#: ~60-80 ms of CPU (the token's validation, uncached as the lab runs no memcached); on 2 cores a
#: round every 0.5 s with a token every 5 kept keystone at half a core for the whole run,
#: slowing the upgrade it watches
INTERVAL = 2.0
TOKEN_EVERY = 15
MAX_ROUNDS = 20_000  # over 4 h at the default interval: a bound, never the usual stop
MAX_SECONDS = 4 * 3600.0
# per HTTP request: a probe call must not hang on a dead backend, yet an answer that comes
# late is an answer (CI runs saw a real keystone take over 3 s, then over 10 s, for one `list
# projects` while two lab scenarios saturated both cores; keystoneauth reports a read timeout
# as ConnectTimeout). The load balancer waits 2 minutes for a server (lab/haproxy.py), an
# openstacksdk user by default forever. Stopping the probe interrupts the call in flight, so
# this does not lengthen a stop.
TIMEOUT = 30.0
CLEANUP_SECONDS = 12.0
IMAGE_DATA = b"stepwise probe image\n"
#: rounds between two probe servers (one every ~30 s at the default interval), and how long
#: one may take to become ACTIVE (the fake driver: seconds; a conductor restarting: more)
SERVER_EVERY = 15
SERVER_TIMEOUT = 180.0
#: a call that had nothing to do this round (a server still building): no record
NOTHING = "nothing"


class Stopped(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT to interrupt the call in flight (a
    BaseException, so the calls' `except Exception` does not record it as a failure)."""


class Failed(Exception):
    """A probe call failed; the message is the record's detail. `began` (epoch) is when the
    request that failed was made, when that was an earlier round's (a server that never became
    ACTIVE failed its create): the record spans from then, so a create a window swallowed (nova
    took it as its conductor stopped, and the build never ran) counts inside that window."""

    def __init__(self, detail: str, began: float | None = None) -> None:
        super().__init__(detail)
        self.began = began


def _fresh_connections_adapter() -> Any:
    """A requests adapter that opens a new connection for every request (see the module
    docstring): http.client keeps a connection unless the *server* says `Connection: close`,
    so the idle ones are closed before each request instead."""
    from requests.adapters import HTTPAdapter

    class FreshConnections(HTTPAdapter):
        def send(self, request: Any, *args: Any, **kwargs: Any) -> Any:
            self.poolmanager.clear()  # single-threaded: only idle connections are in the pools
            return super().send(request, *args, **kwargs)

    return FreshConnections()


def short_error(step: str, exc: BaseException) -> str:
    """`step: [HTTP nnn ]Class: message`, one line, at most 200 characters (no secrets:
    exceptions carry URLs and server messages, never the password)."""
    code = getattr(exc, "status_code", None) or getattr(
        getattr(exc, "response", None), "status_code", None
    )
    msg = " ".join(str(exc).split())
    # a connection error's cause sits at the end of a long urllib3 message: it goes first
    root = _ROOT_CAUSE.findall(msg)
    cause = f"{root[-1].rstrip('.')}: " if root else ""
    text = f"{step}: {f'HTTP {code} ' if code else ''}{type(exc).__name__}: {cause}{msg}"
    return text[:200]


_ROOT_CAUSE = re.compile(
    r"\[Errno -?\d+\] [^'\")\]]+|Read timed out|timed out|RemoteDisconnected\([^)]*\)"
    r"|Connection reset by peer|Connection aborted"
)


def connect(cloud: str, clouds_yaml: str | None, timeout: float) -> Any:
    """An openstacksdk connection to the named cloud of clouds.yaml, a new HTTP connection
    for every request."""
    import openstack
    from openstack import config as os_config

    files = [clouds_yaml] if clouds_yaml else None
    region = os_config.OpenStackConfig(config_files=files).get_one(cloud=cloud, api_timeout=timeout)
    conn = openstack.connection.Connection(config=region)
    http = conn.session.session  # keystoneauth's requests.Session, shared by every proxy
    http.headers["Connection"] = "close"
    for scheme in ("http://", "https://"):
        http.mount(scheme, _fresh_connections_adapter())
    return conn


def _listed(items: Any) -> list[tuple[str, str]]:
    return [(x.id, x.name) for x in items]


def _not_found(e: BaseException) -> bool:
    """Whether openstacksdk said 404 (its NotFoundException; this module imports no sdk)."""
    return getattr(e, "status_code", None) == 404 or type(e).__name__ == "NotFoundException"


class Cloud:
    """The probe's calls over one openstacksdk connection, and the ledger of what they made."""

    def __init__(self, conn: Any, run_id: str):
        self.conn = conn
        self.made = Ledger(f"{PREFIX}{run_id}-")
        pl, im = conn.placement, conn.image
        self.made.kind("rp", lambda: _listed(pl.resource_providers()), pl.delete_resource_provider)
        self.made.kind("image", lambda: _listed(im.images()), im.delete_image)
        #: (id, when created: monotonic and epoch): the server watched
        self.building: tuple[str, float, float] | None = None
        self.server_refs: tuple[str, str] | None = None  # (image id, flavor id), found once
        #: servers whose delete nova took but may not finish, looked at again (`recheck_deletes`)
        self.deleting: dict[str, None] = {}

    def has(self, service_type: str) -> bool:
        """Whether the cloud's catalog lists the service (asked once, at the start)."""
        try:
            return bool(self.conn.has_service(service_type))
        except Exception:  # noqa: BLE001 - no catalog at the start: probe what is sure
            return False

    def keystone(self, issue: bool) -> None:
        step = "token issue"
        try:
            if issue:
                auth = self.conn.session.auth
                auth.invalidate()
                auth.get_token(self.conn.session)  # POST /v3/auth/tokens
            step = "list projects"
            list(self.conn.identity.projects())
        except Exception as e:
            raise Failed(short_error(step, e)) from e

    def nova(self) -> None:
        step = "list servers"
        try:
            # shown: the first server that is not one of the probe's own (those are deleted
            # between a list and a show, by the probe itself)
            found = [
                s
                for s in self.conn.compute.servers(all_projects=True)
                if not (s.name or "").startswith(PREFIX)
            ]
            if found:
                step = "show server"
                self.conn.compute.get_server(found[0].id)
        except Exception as e:
            raise Failed(short_error(step, e)) from e

    def nova_server(self, n: int, every: int, image: str, flavor: str) -> str | None:
        """One step of a small server's life: created every `every` rounds, watched until
        ACTIVE, deleted; NOTHING while it builds or between servers."""
        step = "create server"
        try:
            if self.building is None:
                if n % every:
                    return NOTHING
                if self.server_refs is None:
                    step = "find the server's image and flavor"
                    self.server_refs = (
                        self.conn.image.find_image(image, ignore_missing=False).id,
                        self.conn.compute.find_flavor(flavor, ignore_missing=False).id,
                    )
                    # only now: a cloud without nova has no compute proxy to make
                    cp = self.conn.compute
                    self.made.kind("server", lambda: _listed(cp.servers()), cp.delete_server)
                step = "create server"
                img, fl = self.server_refs
                made = self.made.create(
                    "server",
                    lambda name: self.conn.compute.create_server(
                        name=name, image_id=img, flavor_id=fl, networks="none"
                    ),
                )
                self.building = (made.id, time.monotonic(), time.time())
                return None
            sid, since, created = self.building
            step = "show server"
            found = self.conn.compute.get_server(sid)
            if found.status == "ACTIVE":
                step = "delete server"
                self.conn.compute.delete_server(sid, ignore_missing=False)
                self.made.gone("server", sid)
                self.deleting[sid] = None
                self.building = None
                return None
            if found.status == "ERROR" or time.monotonic() - since > SERVER_TIMEOUT:
                self.building = None  # deleted with the leftovers (retry_deletes)
                fault = (found.fault or {}).get("message", "")
                said = f"server {found.status} after {time.monotonic() - since:.0f} s"
                raise Failed(said + (f": {fault}" if fault else ""), began=created)
            return NOTHING
        except Failed:
            raise
        except Exception as e:
            raise Failed(short_error(step, e)) from e

    def neutron(self) -> None:
        step = "list networks"
        try:
            list(self.conn.network.networks())
            step = "list ports"
            list(self.conn.network.ports())
        except Exception as e:
            raise Failed(short_error(step, e)) from e

    def placement(self) -> None:
        step = "create resource provider"
        try:
            rp = self.made.create(
                "rp", lambda name: self.conn.placement.create_resource_provider(name=name)
            )
            step = "delete resource provider"
            self.conn.placement.delete_resource_provider(rp.id, ignore_missing=False)
            self.made.gone("rp", rp.id)
        except Exception as e:
            raise Failed(short_error(step, e)) from e

    def retry_deletes(self) -> None:
        """Delete again what failed rounds left (a service down between create and delete, a
        create whose answer was lost), but the server being watched (its own step deletes it);
        servers whose delete nova took are looked at again (`recheck_deletes`)."""
        taken = self.made.retry_deletes(keep=frozenset([self.building[0]] if self.building else []))
        self.deleting.update((rid, None) for kind, rid in taken if kind == "server")
        if self.deleting:
            self.recheck_deletes()

    def recheck_deletes(self, most: int = 3) -> None:
        """Look again at servers whose delete nova accepted: a delete is done by the server's
        compute later, and when it fails there (neutron or placement down as it ran) nova puts
        the server in ERROR, still on that compute, where it would stay and hold up the
        compute's drain (nova moves no server in ERROR). Such a one is deleted again, as its
        owner would; one that is gone is forgotten. Quiet, as `retry_deletes`: the call that
        failed was nova's own, not the client's."""
        for sid in list(self.deleting)[:most]:
            del self.deleting[sid]  # back at the end of the queue while it is not gone
            try:
                found = self.conn.compute.get_server(sid)
            except Exception as e:  # noqa: BLE001 - nova down: the next round looks again
                if not _not_found(e):
                    self.deleting[sid] = None
                continue
            self.deleting[sid] = None
            if found.status == "ERROR" and found.task_state != "deleting":
                try:
                    self.conn.compute.delete_server(sid, ignore_missing=True)
                except Exception:  # noqa: BLE001 - the next round tries again
                    pass

    def glance(self) -> None:
        step = "list images"
        try:
            list(self.conn.image.images(limit=5))
            step = "create image"
            img = self.made.create(
                "image",
                lambda name: self.conn.image.create_image(
                    name=name,
                    data=io.BytesIO(IMAGE_DATA),
                    disk_format="raw",
                    container_format="bare",
                    visibility="private",
                    allow_duplicates=True,
                    wait=False,
                    validate_checksum=False,
                    disable_vendor_agent=False,
                ),
            )
            step = "delete image"
            self.conn.image.delete_image(img.id, ignore_missing=False)
            self.made.gone("image", img.id)
        except Exception as e:
            raise Failed(short_error(step, e)) from e

    def drop_token_on_401(self, exc: BaseException) -> None:
        if getattr(exc.__cause__, "status_code", None) == 401:
            try:
                self.conn.session.auth.invalidate()
            except Exception:
                pass


def record(fh: Any, target: str, start_wall: float, start: float, ok: bool, detail: str) -> None:
    rec = {
        "t": round(start_wall, 3),
        "target": target,
        "ok": ok,
        "detail": detail,
        "ms": round((time.perf_counter() - start) * 1000, 1),
    }
    fh.write(json.dumps(rec) + "\n")
    fh.flush()  # the parent reads the file after killing us: every line must be whole


def record_failed(fh: Any, target: str, start_wall: float, start: float, e: Failed) -> None:
    """The record of a failed call, spanning from the request that failed (`Failed.began`)
    when that was an earlier round's."""
    if e.began is not None:
        start -= start_wall - e.began
        start_wall = e.began
    record(fh, target, start_wall, start, False, str(e))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cloud", required=True, help="cloud name in clouds.yaml")
    p.add_argument(
        "--clouds-yaml",
        default=os.environ.get("OS_CLIENT_CONFIG_FILE"),
        help="clouds.yaml path (default: $OS_CLIENT_CONFIG_FILE, else openstacksdk's search)",
    )
    p.add_argument("--out", required=True, help="JSON-lines file the records are appended to")
    p.add_argument(
        "--interval", type=float, default=INTERVAL, help="seconds between rounds (0.1..60)"
    )
    p.add_argument("--max-seconds", type=float, default=3600.0)
    p.add_argument("--timeout", type=float, default=TIMEOUT, help="per-request timeout (0.5..30)")
    p.add_argument(
        "--token-every",
        type=int,
        default=TOKEN_EVERY,
        help="issue a new token every N rounds (keystone hashes the password each time)",
    )
    p.add_argument("--server-image", help="image name of the probe's servers (none: no servers)")
    p.add_argument("--server-flavor", help="flavor name of the probe's servers")
    p.add_argument(
        "--server-every", type=int, default=SERVER_EVERY, help="rounds between two servers"
    )
    a = p.parse_args(argv)
    a.server_every = max(a.server_every, 1)
    a.interval = min(max(a.interval, 0.1), 60.0)
    a.max_seconds = min(max(a.max_seconds, 0.0), MAX_SECONDS)
    a.timeout = min(max(a.timeout, 0.5), 30.0)
    a.token_every = max(a.token_every, 1)
    return a


Call = Callable[[int], "str | None"]


def _calls(cloud: Cloud, args: argparse.Namespace) -> list[tuple[str, Call]]:
    """(target, call of round n) for every round: keystone, placement and glance; compute and
    network where the cloud's catalog lists them (a lab with real nova), and the small
    server's life when its image and flavor are given."""
    calls: list[tuple[str, Call]] = [
        ("client:keystone", lambda n: cloud.keystone(issue=n % args.token_every == 0)),
        ("client:placement", lambda n: cloud.placement()),
        ("client:glance", lambda n: cloud.glance()),
    ]
    calls += [
        (f"client:{name}", call)
        for name, kind, call in (
            ("nova", "compute", lambda n: cloud.nova()),
            ("neutron", "network", lambda n: cloud.neutron()),
        )
        if cloud.has(kind)
    ]
    if args.server_image and args.server_flavor and cloud.has("compute"):
        every, image, flavor = args.server_every, args.server_image, args.server_flavor
        calls.append(("client:nova-server", lambda n: cloud.nova_server(n, every, image, flavor)))
    return calls


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    stopping = {"now": False}

    def on_signal(_sig: int, _frame: Any) -> None:
        if not stopping["now"]:  # the first signal interrupts the call in flight; later ones wait
            stopping["now"] = True
            raise Stopped()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t_end = time.monotonic() + args.max_seconds
    cloud: Cloud | None = None
    with open(args.out, "a") as fh:
        try:
            try:
                conn = connect(args.cloud, args.clouds_yaml, args.timeout)
                cloud = Cloud(conn, uuid.uuid4().hex[:8])
            except Exception as e:  # no such cloud, an unreadable clouds.yaml: nothing to probe
                print(
                    f"client_probe: {type(e).__name__}: {' '.join(str(e).split())[:300]}",
                    file=sys.stderr,
                )
                return 2
            calls = _calls(cloud, args)
            nxt = time.monotonic()
            for n in range(MAX_ROUNDS):
                if stopping["now"] or time.monotonic() >= t_end:
                    break
                for target, call in calls:
                    wall, start = time.time(), time.perf_counter()
                    try:
                        if call(n) != NOTHING:
                            record(fh, target, wall, start, True, "ok")
                    except Failed as e:
                        record_failed(fh, target, wall, start, e)
                        cloud.drop_token_on_401(e)
                # a slow round (timeouts) is not made up for by a burst of rounds after it
                cloud.retry_deletes()
                nxt = max(nxt + args.interval, time.monotonic())
                time.sleep(max(0.0, nxt - time.monotonic()))
        except Stopped:
            pass  # the interrupted call is not recorded: it was ours that stopped, not the cloud
        finally:
            stopping["now"] = True  # a signal during cleanup no longer interrupts it
            if cloud is not None:
                left = cloud.made.cleanup(time.monotonic() + CLEANUP_SECONDS)
                if left:
                    print(
                        f"client_probe: left behind, the cloud did not take their delete in"
                        f" {CLEANUP_SECONDS:.0f} s: {', '.join(left)}",
                        file=sys.stderr,
                    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
