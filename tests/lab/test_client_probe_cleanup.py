"""The client probe deletes what it created, also what a lost answer hid from it: a create
whose service stopped under it (the row committed, the answer never came) or that the
probe's own stop interrupted. Against stand-ins of openstacksdk's image and placement proxies
(the real cloud's run: tests/lab/test_openstack_client.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from stepwise.lab.openstack import client_ledger, client_probe
from stepwise.lab.openstack.client_probe import Cloud, Failed


class Images:
    """Glance as the probe sees it. `lose` answers: the create commits, then raises (glance
    stopped before its answer); `hidden`: how many of the next listings do not show the rows
    yet (a create still committing as a sweep lists); `down`: every call fails."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}  # id -> name
        self.lose = self.down = False
        self.hidden = 0
        self.lists = 0
        self.deleted: list[str] = []

    def _up(self) -> None:
        if self.down:
            raise ConnectionError("[Errno 111] Connection refused")

    def create_image(self, name, **_kw):
        self._up()
        iid = f"img-{len(self.rows)}"
        self.rows[iid] = name
        if self.lose:
            raise ConnectionError("Connection aborted")
        return SimpleNamespace(id=iid)

    def images(self, **_kw):
        self._up()
        self.lists += 1
        if self.hidden:
            self.hidden -= 1
            return []
        return [SimpleNamespace(id=i, name=n) for i, n in self.rows.items()]

    def delete_image(self, iid, ignore_missing=False):
        self._up()
        self.rows.pop(iid, None)
        self.deleted.append(iid)


def _cloud(images: Images) -> Cloud:
    placement = SimpleNamespace(
        resource_providers=lambda: [], delete_resource_provider=lambda i, ignore_missing: None
    )
    return Cloud(SimpleNamespace(image=images, placement=placement), "r1")


def test_a_create_whose_answer_was_lost_is_found_by_name_and_deleted_when_glance_is_back():
    images = Images()
    cloud = _cloud(images)
    images.lose = True
    with pytest.raises(Failed, match="create image"):
        cloud.glance()
    assert (
        list(images.rows.values()) == ["stepwise-probe-r1-image-1"]
        and cloud.made.known["image"] == set()
    )
    images.down = True
    cloud.retry_deletes()  # glance still down: it stays pending
    assert cloud.made.pending.keys() == {"stepwise-probe-r1-image-1"}
    images.down = images.lose = False
    cloud.retry_deletes()
    assert images.rows == {} and images.deleted == ["img-0"] and cloud.made.pending == {}


def test_a_create_that_never_landed_is_forgotten_after_a_while(monkeypatch):
    images = Images()
    cloud = _cloud(images)

    def refused(name, **_kw):
        raise ConnectionError("Connection aborted")  # glance died before committing it

    images.create_image = refused
    with pytest.raises(Failed, match="create image"):
        cloud.glance()
    cloud.retry_deletes()  # not listed yet, but it may still be committing
    assert "stepwise-probe-r1-image-1" in cloud.made.pending
    now = time.monotonic()
    monkeypatch.setattr(time, "monotonic", lambda: now + client_ledger.LOST_AFTER + 1)
    cloud.retry_deletes()
    assert cloud.made.pending == {} and images.deleted == []


def test_the_stop_sweeps_again_for_a_create_it_interrupted():
    images = Images()
    cloud = _cloud(images)

    def interrupted(name, **_kw):
        images.rows["img-9"] = name  # still committing on the server as the stop arrives
        images.hidden = 1
        raise client_probe.Stopped()

    images.create_image = interrupted
    with pytest.raises(client_probe.Stopped):
        cloud.glance()
    assert cloud.made.cleanup(time.monotonic() + 5) == []
    assert images.deleted == ["img-9"] and images.lists == 3  # the round's, two sweeps


def test_the_stop_without_a_pending_create_sweeps_once_and_reports_what_it_could_not_delete():
    images = Images()
    cloud = _cloud(images)
    cloud.glance()
    assert images.rows == {} and images.lists == 1  # the round lists, creates, deletes
    assert cloud.made.cleanup(time.monotonic() + 5) == [] and images.lists == 2
    cloud.made.known["image"].add("img-7")  # a delete the round could not make
    images.down = True
    assert cloud.made.cleanup(time.monotonic() + 0.2) == ["img-7"]
