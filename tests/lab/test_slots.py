"""Two labs on one machine never share a slot (their addresses and ports derive from it)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from stepwise.lab.slots import claim_index, registry, release_index


def test_a_process_that_moved_its_temporary_directory_still_sees_the_other_labs(tmp_path: Path):
    """CI's real-OpenStack scenario set `tempfile.tempdir` to keep the demo's store apart: the
    registry followed it, the lab claimed slot 0 while the containers scenario's lab held it,
    and both labs' Galera members and keystones answered each other."""
    first, second = tmp_path / "first", tmp_path / "second"
    saved = tempfile.tempdir
    try:
        tempfile.tempdir = str(tmp_path / "a")
        Path(tempfile.tempdir).mkdir()
        a = claim_index(first)
        tempfile.tempdir = str(tmp_path / "b")
        Path(tempfile.tempdir).mkdir()
        b = claim_index(second)
        assert a != b
        assert not registry().is_relative_to(tmp_path)
    finally:
        tempfile.tempdir = saved
        release_index(first)
        release_index(second)


def test_a_slot_whose_addresses_a_leftover_process_holds_is_refused():
    """A RabbitMQ member or mariadbd left by a lab whose supervisor was killed holds the
    slot's addresses: the next lab of that slot says so before it starts anything."""
    import socket

    import pytest

    from stepwise.errors import StepwiseError
    from stepwise.lab.control import _refuse_taken_addresses
    from stepwise.lab.nodes import ADDRESS_BASE
    from stepwise.lab.rabbitmq import DIST_BASE

    index = 97  # a slot the suite's labs never reach
    with socket.socket() as left, socket.socket() as dist:
        left.bind((f"127.{ADDRESS_BASE + index}.1.1", 0))
        left.listen()
        dist.bind(("127.0.0.1", DIST_BASE + 100 * index + 1))
        dist.listen()
        with pytest.raises(StepwiseError) as exc:
            _refuse_taken_addresses(index)
        said = str(exc.value)
        assert f"127.{ADDRESS_BASE + index}.1.1:{left.getsockname()[1]}" in said
        assert f"127.0.0.1:{DIST_BASE + 100 * index + 1}" in said
    _refuse_taken_addresses(index)  # free again
