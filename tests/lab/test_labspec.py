"""The lab's typed spec (stepwise.lab.labspec) and its registry of kinds (stepwise.lab.kinds),
without a lab: every example's lab.json reads back into the values it was written from, a
mistyped or missing field is refused with its path, and every kind an example uses is found
by name and says what it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepwise.errors import InputError
from stepwise.lab.kinds import kind_named, kinds_in
from stepwise.lab.labspec import SpecError, spec_from_json
from stepwise.lab.nodes import Lab
from stepwise.lab.spec import build_spec
from stepwise.model import load_deployment

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_examples_lab_json_reads_back_into_the_values_it_was_written_from(example: Path):
    spec = build_spec(load_deployment(example), "/nonexistent", 5)
    text = json.dumps(spec.to_json())
    assert spec_from_json(json.loads(text)) == spec
    # every kind the example's lab runs is registered, under its own name
    for kind, services in kinds_in(spec).items():
        assert kind_named(kind).name == kind and services


def test_the_kinds_of_a_real_openstack_lab():
    spec = build_spec(load_deployment(ROOT / "examples" / "openstack-nova.yaml"), "/x", 5)
    kinds = {s: v.kind for s, v in spec.services.items()}
    assert kinds["galera"] == "galera" and kinds["rabbitmq"] == "rabbitmq"
    assert kinds["keystone"] == kinds["nova_api"] == "openstack_api"
    assert kinds["nova_compute"] == kinds["nova_conductor"] == "openstack_process"
    assert kinds["memcached"] == "memcached" and kinds["haproxy"] == "stand_in"
    assert kind_named("galera").protocol == "mysql" and kind_named("galera").real
    assert not kind_named("stand_in").real and kind_named("workload").reloads is False


def test_a_kind_no_module_defines_is_refused_by_name():
    for name in ("no_such_kind", "../etc", "stand-in"):
        with pytest.raises(ValueError, match="no lab service kind"):
            kind_named(name)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["services"]["keystone"].update(port="5000"), "services.keystone.port"),
        (lambda d: d["services"]["keystone"].pop("kind"), "services.keystone.kind"),
        (lambda d: d["nodes"]["controller-0"].update(services="keystone"), "services"),
        (lambda d: d.update(vips=[]), "vips"),
        (lambda d: d["vips"]["keystone"].update(port=True), "vips.keystone.port"),
    ],
)
def test_a_mistyped_or_missing_field_is_refused_with_its_path(tmp_path: Path, change, field):
    spec = build_spec(load_deployment(ROOT / "examples" / "classic.yaml"), str(tmp_path), 5)
    data = spec.to_json()
    change(data)
    with pytest.raises(SpecError) as info:
        spec_from_json(data)
    assert field in (info.value.field or ""), info.value
    # what a reader of the lab directory gets: the file and the field, no traceback
    (tmp_path / "lab.json").write_text(json.dumps(data))
    with pytest.raises(InputError) as refused:
        Lab(tmp_path).spec  # noqa: B018 - reading is the test
    (problem,) = refused.value.problems
    assert problem.file == str(tmp_path / "lab.json") and field in (problem.field or "")
