"""The client probe's small server, step by step against a stand-in of openstacksdk's compute
and image proxies (the real cloud's run is tests/run/test_e2e_real_nova.py): created every N
rounds, watched until ACTIVE, deleted; ERROR or too long a build is a failure with nova's
fault; what is left is deleted later."""

from __future__ import annotations

import io
import json
import time
from types import SimpleNamespace

import pytest

from stepwise.lab.openstack import client_probe
from stepwise.lab.openstack.client_probe import NOTHING, Cloud, Failed
from stepwise.observe.windows import outside_windows


class NotFoundException(Exception):
    """openstacksdk's answer to a GET of what nova no longer has (its status code is what
    the probe reads: the probe's venv has openstacksdk, this one does not)."""

    status_code = 404


class Nova:
    """Servers that become what `script` says, one status per `get_server`."""

    def __init__(self, *script: str, fault: dict | None = None) -> None:
        self.script, self.fault = list(script), fault
        self.made: list[str] = []
        self.deleted: list[str] = []
        self.gone: set[str] = set()  # what nova no longer has

    def find_flavor(self, name, ignore_missing):
        return SimpleNamespace(id=f"flavor-{name}")

    def create_server(self, name, image_id, flavor_id, networks):
        assert (image_id, flavor_id, networks) == ("image-img", "flavor-fl", "none")
        self.made.append(f"srv-{len(self.made)}")
        return SimpleNamespace(id=self.made[-1])

    def get_server(self, sid):
        if sid in self.gone:
            raise NotFoundException(f"No Server found for {sid}")
        status = self.script.pop(0) if self.script else "BUILD"
        return SimpleNamespace(id=sid, status=status, task_state=None, fault=self.fault)

    def delete_server(self, sid, ignore_missing):
        self.deleted.append(sid)


def _cloud(nova: Nova) -> Cloud:
    image = SimpleNamespace(
        find_image=lambda name, ignore_missing: SimpleNamespace(id="image-" + name)
    )
    image.delete_image = lambda i, ignore_missing: None
    placement = SimpleNamespace(delete_resource_provider=lambda i, ignore_missing: None)
    return Cloud(SimpleNamespace(compute=nova, image=image, placement=placement), "r1")


def _step(cloud: Cloud, n: int):
    return cloud.nova_server(n, 3, "img", "fl")


def test_a_server_is_made_every_n_rounds_watched_until_active_then_deleted():
    nova = Nova("BUILD", "BUILD", "ACTIVE")
    cloud = _cloud(nova)
    assert _step(cloud, 1) == NOTHING  # not a round that makes one
    assert _step(cloud, 3) is None  # created: a record
    assert nova.made == ["srv-0"] and cloud.made.known["server"] == {"srv-0"}
    assert [_step(cloud, n) for n in (4, 5)] == [NOTHING, NOTHING]  # still building
    assert _step(cloud, 6) is None  # ACTIVE: deleted, a record
    assert (
        nova.deleted == ["srv-0"] and cloud.made.known["server"] == set() and cloud.building is None
    )
    assert _step(cloud, 7) == NOTHING and _step(cloud, 9) is None  # the next one
    assert nova.made == ["srv-0", "srv-1"]


def test_an_error_is_a_failure_with_novas_fault_and_the_server_deleted_later():
    nova = Nova("ERROR", fault={"message": "No valid host was found."})
    cloud = _cloud(nova)
    _step(cloud, 0)
    with pytest.raises(Failed, match="server ERROR after 0 s: No valid host was found"):
        _step(cloud, 1)
    assert cloud.building is None and cloud.made.known["server"] == {"srv-0"}
    cloud.retry_deletes()  # the leftover goes with the next round's deletes
    assert nova.deleted == ["srv-0"] and cloud.made.known["server"] == set()
    assert list(cloud.deleting) == ["srv-0"]  # and is looked at again until nova has it gone


def test_a_build_longer_than_the_timeout_fails_from_its_create():
    # nova took the create as its conductor stopped (a window began) and the build never ran:
    # the failure is the create's, so its record spans from the create, into that window
    nova = Nova()
    cloud = _cloud(nova)
    _step(cloud, 0)
    sid, since, created = cloud.building
    cloud.building = (sid, since - client_probe.SERVER_TIMEOUT - 1, created - 200.0)
    with pytest.raises(Failed, match=r"server BUILD after 18\d s") as failed:
        _step(cloud, 1)
    assert failed.value.began == created - 200.0
    out = io.StringIO()
    now = time.perf_counter()
    client_probe.record_failed(out, "client:nova-server", created, now, failed.value)
    rec = json.loads(out.getvalue())
    assert rec["t"] == round(created - 200.0, 3) and rec["ok"] is False
    assert 200_000 <= rec["ms"] < 210_000
    window = {"nova_conductor": [(created - 201.0, created - 190.0)]}
    assert outside_windows([rec], window) == {}
    assert outside_windows([dict(rec, ms=0.0, t=created)], window) == {"client:nova-server": 1}


def test_an_api_error_names_the_call():
    nova = Nova()
    cloud = _cloud(nova)

    def down(*_a, **_k):
        raise ConnectionError("[Errno 111] Connection refused")

    nova.create_server = down
    with pytest.raises(Failed, match="create server"):
        _step(cloud, 0)


def test_a_server_whose_delete_failed_on_its_compute_is_deleted_again_until_gone():
    # nova took the delete, then its compute failed it (neutron down as it ran): the server
    # is in ERROR on that compute, where it would hold up the compute's drain
    nova = Nova("ACTIVE", "ERROR", "ERROR")
    cloud = _cloud(nova)
    _step(cloud, 0)
    assert _step(cloud, 1) is None and nova.deleted == ["srv-0"]
    cloud.retry_deletes()  # the round's end looks again: ERROR, so deleted again
    assert nova.deleted == ["srv-0", "srv-0"] and list(cloud.deleting) == ["srv-0"]
    cloud.retry_deletes()
    assert nova.deleted == ["srv-0"] * 3
    nova.gone.add("srv-0")
    cloud.retry_deletes()  # gone: forgotten, no more calls
    assert cloud.deleting == {} and nova.deleted == ["srv-0"] * 3


def test_a_server_being_deleted_is_not_deleted_again():
    nova = Nova("ACTIVE", "ERROR")
    cloud = _cloud(nova)
    _step(cloud, 0)
    _step(cloud, 1)
    real_get = nova.get_server
    nova.get_server = lambda sid: SimpleNamespace(
        **{**vars(real_get(sid)), "task_state": "deleting"}
    )
    cloud.retry_deletes()
    assert nova.deleted == ["srv-0"] and list(cloud.deleting) == ["srv-0"]
