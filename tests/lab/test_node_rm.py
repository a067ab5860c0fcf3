"""`rm` on a lab node (the OS upgrade's new RabbitMQ member removes its old database with it):
the real GNU rm, on paths inside the node's root only."""

from __future__ import annotations

from pathlib import Path

from stepwise.lab.nodecmd_files import rm
from tests.lab.test_real_infra import _lab


def test_rm_removes_under_the_node_root_and_nothing_outside(tmp_path: Path, capsys):
    lab = _lab(tmp_path)
    mnesia = lab.node_path("controller-0", "/var/lib/rabbitmq/mnesia")
    (mnesia / "rabbit1@localhost").mkdir(parents=True)
    (mnesia / "rabbit1@localhost" / "schema.DAT").write_text("old cluster")
    beside = tmp_path / "outside"
    beside.write_text("keep")
    other = lab.node_path("controller-1", "/var/lib/rabbitmq/mnesia")
    other.mkdir(parents=True)

    assert rm(lab, "controller-0", ["-rf", "/var/lib/rabbitmq/mnesia"]) == 0
    assert not mnesia.exists() and mnesia.parent.is_dir()
    assert other.is_dir(), "another node's files are not this node's"
    # -f: a path already gone is no error, as with the real rm
    assert rm(lab, "controller-0", ["-rf", "/var/lib/rabbitmq/mnesia"]) == 0
    assert rm(lab, "controller-0", ["/var/lib/rabbitmq/mnesia"]) == 1

    for refused in ("/", "/..", "/var/../..", f"/../../../{beside.name}", "relative/path"):
        assert rm(lab, "controller-0", ["-rf", refused]) == 1, refused
        assert "refusing to remove" in capsys.readouterr().err
    assert beside.read_text() == "keep" and lab.node_root("controller-0").is_dir()
    assert rm(lab, "controller-0", ["-rf"]) == 1
    assert "missing operand" in capsys.readouterr().err
