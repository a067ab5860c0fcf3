"""Which lab `lab status` / `lab down` / `lab probe` act on without --dir: the one that runs
(labs already down do not count), or the only one there is; several -> a list and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwise.errors import InputError
from stepwise.lab import control
from stepwise.lab.nodes import Lab


def _labs(home: Path, *names: str) -> None:
    for n in names:
        (home / n).mkdir(parents=True)
        (home / n / "lab.json").write_text("{}")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STEPWISE_LAB_HOME", str(tmp_path / "labs"))
    (tmp_path / "labs").mkdir()
    return tmp_path / "labs"


def _running(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    monkeypatch.setattr(Lab, "supervisor_alive", lambda self: self.dir.name in names)


def test_the_one_running_lab_is_found_among_labs_already_down(
    home: Path, monkeypatch: pytest.MonkeyPatch
):
    _labs(home, "classic", "composed", "openstack")
    _running(monkeypatch, "composed")
    assert control.find_lab(None).dir == (home / "composed").resolve()


def test_several_running_labs_are_listed(home: Path, monkeypatch: pytest.MonkeyPatch):
    _labs(home, "classic", "composed", "openstack")
    _running(monkeypatch, "classic", "openstack")
    with pytest.raises(InputError) as exc:
        control.find_lab(None)
    text = str(exc.value)
    assert (
        "2 labs run" in text
        and "classic" in text
        and "openstack" in text
        and "composed" not in text
    )


def test_the_only_lab_is_found_when_it_is_down(home: Path, monkeypatch: pytest.MonkeyPatch):
    _labs(home, "classic")
    _running(monkeypatch)
    assert control.find_lab(None).dir.name == "classic"


def test_several_labs_none_running_and_no_lab_are_clear_errors(
    home: Path, monkeypatch: pytest.MonkeyPatch
):
    with pytest.raises(InputError, match="no lab under"):
        control.find_lab(None)
    _labs(home, "a", "b")
    _running(monkeypatch)
    with pytest.raises(InputError, match="2 labs exist, none running"):
        control.find_lab(None)
