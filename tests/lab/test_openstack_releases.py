"""The lab's real OpenStack releases: each lock installs exactly the code the release table
says, the lab versions map to the right release, and a bad series is a clear input error."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwise.errors import InputError
from stepwise.lab.openstack import releases as openstack_releases
from stepwise.lab.openstack import venvs


@pytest.mark.parametrize(
    "release", [r for rs in openstack_releases.SERIES.values() for r in rs], ids=lambda r: r.lock
)
def test_every_lock_pins_its_release_code(release):
    pins = dict(line.split("==", 1) for line in venvs.requirements(release.lock) if "==" in line)
    for project, version in release.versions:
        assert pins.get(project) == version, (release.lock, project, pins.get(project))
    # a freeze, not a wish list: the libraries are pinned too (no resolution at build time)
    assert len(pins) > 80 and all(v for v in pins.values())
    assert pins.get("PyMySQL")


def test_lab_versions_map_to_first_patch_latest_patch_and_next_series():
    first, latest, nxt = openstack_releases.SERIES["2025.1"]
    assert openstack_releases.release_for("2025.1", "1.0.0") is first
    assert openstack_releases.release_for("2025.1", "1.1.0") is latest
    assert openstack_releases.release_for("2025.1", "2.0.0") is nxt and nxt.series == "2025.2"
    assert (
        openstack_releases.release_for("2025.1", None) is None
        and openstack_releases.release_for("1999.1", "1.0.0") is None
    )
    # keystone 2025.2 carries a real expand migration over 2025.1: the major upgrade migrates
    assert openstack_releases.version_of(nxt, "keystone").split(".")[0] == "28"


def test_an_empty_lock_is_refused_not_built(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "empty.txt").write_text("# nothing\n")
    monkeypatch.setattr(venvs, "LOCK_DIR", locks)
    with pytest.raises(venvs.VenvError, match="lists no package"):
        venvs.ensure_venv("empty")
    assert not venvs.is_built("empty")


def test_a_series_the_lab_has_no_code_for_is_an_input_error(tmp_path: Path):
    from stepwise.lab.spec import build_spec
    from stepwise.model import load_deployment

    src = Path(__file__).resolve().parents[2] / "examples" / "openstack.yaml"
    f = tmp_path / "cloud.yaml"
    import re

    f.write_text(re.sub(r'openstack: "[0-9.]+"', 'openstack: "2031.1"', src.read_text()))
    dep = load_deployment(f)
    with pytest.raises(InputError) as info:
        build_spec(dep, str(tmp_path / "lab"), 0)
    (p,) = info.value.problems
    assert (
        p.field == "lab.openstack"
        and "2031.1" in p.message
        and "2023.2" in p.hint
        and "2025.1" in p.hint
    )


def test_lab_passwords_are_never_taken_for_an_option():
    from stepwise.lab.openstack.config import new_password

    pws = [new_password() for _ in range(2000)]
    assert all(p[0].isalpha() and len(p) >= 20 for p in pws)
    assert len(set(pws)) == len(pws)
