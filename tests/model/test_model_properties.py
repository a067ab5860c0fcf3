"""Properties of the loaders: round trips, located unknown keys, cycle detection, rule
arithmetic."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepwise.errors import InputError
from stepwise.model import Availability, load_catalog, load_deployment
from stepwise.model.catalog_checks import find_cycle

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
SERVICES = ["db", "api", "agent", "cache"]


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    d = tmp_path_factory.mktemp("cat")
    for name, plane in zip(SERVICES, ["infra", "control", "data", "infra"], strict=True):
        (d / f"{name}.yaml").write_text(f"name: {name}\nplane: {plane}\n")
    return load_catalog(d)


# ------------------------------------------------------------------------------ deployments

#: words YAML reads as booleans or null when unquoted (`name: ON` is True): not names
YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}
names = st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s.lower() not in YAML_WORDS
)
addresses = st.one_of(st.none(), st.ip_addresses(v=4).map(str))


@st.composite
def deployments(draw):
    """A random valid deployment as plain data, with globally unique role and node names."""
    role_names = draw(st.lists(names, min_size=1, max_size=4, unique_by=str.lower))
    roles = []
    for ri, rname in enumerate(role_names):
        role = {"name": rname}
        if draw(st.booleans()):
            role["tags"] = draw(
                st.lists(st.sampled_from(["controlplane", "management", "storage"]), unique=True)
            )
        if draw(st.booleans()):
            role["update_serial"] = draw(st.integers(1, 50))
        role["services"] = draw(st.lists(st.sampled_from(SERVICES), unique=True, max_size=4))
        if draw(st.booleans()):
            count = draw(st.integers(0, 6))
            spec = {"count": count, "name": f"r{ri}-n{{index}}"}
            if draw(st.booleans()):
                spec["start"] = draw(st.integers(0, 20))
            if draw(st.booleans()):
                spec["address"] = f"10.{ri}.0.{{index}}"
            role["nodes"] = spec
        else:
            nodes = []
            for ni in range(draw(st.integers(0, 4))):
                node = {"name": f"r{ri}-{draw(names)}-{ni}"}
                addr = draw(addresses)
                if addr:
                    node["address"] = addr
                if draw(st.booleans()):
                    node["vars"] = {"ansible_user": draw(names)}
                nodes.append(node)
            role["nodes"] = nodes
            if nodes and draw(st.booleans()):
                role["bootstrap"] = draw(st.sampled_from(nodes))["name"]
        roles.append(role)
    return {"name": draw(names), "roles": roles}


def expected_nodes(doc):
    out = []
    for role in doc["roles"]:
        spec = role["nodes"]
        if isinstance(spec, dict):
            for i in range(spec["count"]):
                idx = spec.get("start", 0) + i
                addr = spec["address"].format(index=idx) if "address" in spec else None
                out.append((spec["name"].format(index=idx), role["name"], addr, {}))
        else:
            out.extend((n["name"], role["name"], n.get("address"), n.get("vars", {})) for n in spec)
    return out


def dump(doc, flow: bool) -> str:
    import io

    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.default_flow_style = flow
    buf = io.StringIO()
    yaml.dump(doc, buf)
    return buf.getvalue()


@SETTINGS
@given(doc=deployments(), flow=st.booleans())
def test_valid_deployments_round_trip(catalog, doc, flow):
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "cloud.yaml"
        f.write_text(dump(doc, flow))
        dep = load_deployment(f, catalog)
    assert dep.name == doc["name"]
    assert [r.name for r in dep.roles] == [r["name"] for r in doc["roles"]]
    for role, spec in zip(dep.roles, doc["roles"], strict=True):
        assert role.services == tuple(spec["services"])
        assert role.tags == tuple(spec.get("tags", ()))
        assert role.update_serial == spec.get("update_serial", 1)
        if role.nodes:
            assert role.bootstrap_node.name == spec.get("bootstrap", role.nodes[0].name)
    assert [(n.name, n.role, n.address, dict(n.vars)) for n in dep.nodes] == expected_nodes(doc)
    assert [n.index for n in dep.nodes] == list(range(len(dep.nodes)))
    for s, nodes in dep.instances.items():
        assert [n.name for n in nodes] == [n.name for n in dep.nodes if s in dep.services_on(n)]


# ------------------------------------------------------------------------------ unknown keys

ALLOWED = {
    "top": [
        "name",
        "description",
        "catalog",
        "vars",
        "reboot_packages",
        "drain_policy",
        "style",
        "containers",
        "roles",
        "lab",
    ],
    "role": [
        "name",
        "description",
        "tags",
        "update_serial",
        "services",
        "nodes",
        "bootstrap",
        "vars",
        "tool_packages",
        "style",
        "unmanaged",
    ],
    "node": ["name", "address", "vars"],
    "count": ["count", "name", "address", "start", "vars"],
}


def emit(doc):
    """Block-style YAML of a deployment, with the places a key can be inserted:
    (index of the line to insert before, indent, field prefix, kind)."""
    lines = [f"name: {doc['name']}", "roles:"]
    spots = [(1, 0, "", "top")]
    for ri, role in enumerate(doc["roles"]):
        lines.append(f"  - name: {role['name']}")
        spots.append((len(lines), 4, f"roles[{ri}].", "role"))
        lines.append(f"    services: [{', '.join(role['services'])}]")
        spec = role["nodes"]
        if isinstance(spec, dict):
            lines.append("    nodes:")
            lines.append(f"      count: {spec['count']}")
            spots.append((len(lines), 6, f"roles[{ri}].nodes.", "count"))
            lines.append(f'      name: "{spec["name"]}"')
        else:
            lines.append("    nodes:" + ("" if spec else " []"))
            for ni, node in enumerate(spec):
                lines.append(f"      - name: {node['name']}")
                spots.append((len(lines), 8, f"roles[{ri}].nodes[{ni}].", "node"))
    return lines, spots


junk_keys = st.from_regex(r"[a-z][a-z_]{0,12}", fullmatch=True)


@SETTINGS
@given(doc=deployments(), data=st.data())
def test_an_unknown_key_is_reported_at_its_line_with_the_allowed_keys(catalog, doc, data):
    lines, spots = emit(doc)
    at, indent, prefix, kind = data.draw(st.sampled_from(spots))
    key = data.draw(junk_keys.filter(lambda k: k not in ALLOWED[kind]))
    lines.insert(at, " " * indent + f"{key}: 1")
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "cloud.yaml"
        f.write_text("\n".join(lines) + "\n")
        with pytest.raises(InputError) as info:
            load_deployment(f, catalog)
    (p,) = info.value.problems
    assert (p.file, p.line, p.field, p.message) == (
        str(f),
        at + 1,
        prefix + key,
        f"unknown key '{key}'",
    )
    assert p.hint == "remove it or use one of: " + ", ".join(ALLOWED[kind])


# ------------------------------------------------------------------------------ cycles

graphs = st.integers(1, 7).flatmap(
    lambda n: st.dictionaries(
        st.sampled_from([f"s{i}" for i in range(n)]),
        st.lists(st.sampled_from([f"s{i}" for i in range(n)]), unique=True, max_size=3),
        min_size=n,
        max_size=n,
    )
)


def has_cycle(graph) -> bool:
    """Reference: Kahn's algorithm leaves nodes over iff there is a cycle."""
    indeg = {n: 0 for n in graph}
    for _n, deps in graph.items():
        for d in deps:
            indeg[d] += 1
    ready = [n for n, k in indeg.items() if k == 0]
    seen = 0
    while ready:
        n = ready.pop()
        seen += 1
        for d in graph[n]:
            indeg[d] -= 1
            if indeg[d] == 0:
                ready.append(d)
    return seen < len(graph)


def assert_real_cycle(graph, cycle):
    assert len(cycle) >= 2 and cycle[0] == cycle[-1]
    assert len(set(cycle[:-1])) == len(cycle) - 1  # a simple cycle
    for a, b in zip(cycle, cycle[1:], strict=False):
        assert b in graph[a], (a, b)


@settings(max_examples=100, deadline=None)
@given(graph=graphs)
def test_find_cycle_finds_a_real_cycle_iff_one_exists(graph):
    cycle = find_cycle(graph)
    assert (cycle is not None) == has_cycle(graph)
    if cycle is not None:
        assert_real_cycle(graph, cycle)
        # deterministic, whatever order the graph was written in
        assert find_cycle(dict(reversed(list(graph.items())))) == cycle


@SETTINGS
@given(graph=graphs.map(lambda g: {n: [d for d in deps if d != n] for n, deps in g.items()}))
def test_catalog_reports_a_dependency_cycle_iff_one_exists(graph):
    with tempfile.TemporaryDirectory() as d:
        cat = Path(d)
        for name, deps in graph.items():
            body = "".join(f"  - {x}\n" for x in deps)
            (cat / f"{name}.yaml").write_text(
                f"name: {name}\nplane: control\ndepends_on:{'' if deps else ' []'}\n{body}"
            )
        if not has_cycle(graph):
            assert set(load_catalog(cat).services) == set(graph)
            return
        with pytest.raises(InputError) as info:
            load_catalog(cat)
    (p,) = info.value.problems
    assert p.message.startswith("dependency cycle: ")
    cycle = p.message.removeprefix("dependency cycle: ").split(" -> ")
    assert_real_cycle(graph, cycle)
    i = graph[cycle[0]].index(cycle[1])
    assert (p.file, p.line, p.field) == (str(cat / f"{cycle[0]}.yaml"), 4 + i, f"depends_on[{i}]")


# ------------------------------------------------------------------------------ availability


@settings(max_examples=100, deadline=None)
@given(percent=st.integers(1, 100), total=st.integers(1, 20000))
def test_percentages_round_down_but_allow_at_least_one(percent, total):
    rule = Availability("max_unavailable", percent / 100)
    down = rule.allowed_down(total)
    assert 1 <= down <= total
    assert down == max(1, (total * percent) // 100)
    assert rule.allowed_down(total + 1) >= down


@settings(max_examples=100, deadline=None)
@given(total=st.integers(0, 20000))
def test_quorum_keeps_a_strict_majority_and_allows_no_more(total):
    down = Availability("quorum", "majority").allowed_down(total)
    assert down >= 0
    if total:
        assert (total - down) * 2 > total  # a majority stays up
        assert (total - down - 1) * 2 <= total  # one more down would lose it
    assert down == total - (total // 2 + 1) if total else down == 0


@settings(max_examples=100, deadline=None)
@given(keep=st.integers(0, 50), total=st.integers(0, 100), count=st.integers(0, 60))
def test_min_available_and_fixed_max_unavailable(keep, total, count):
    assert Availability("min_available", keep).allowed_down(total) == max(0, total - keep)
    assert Availability("max_unavailable", count).allowed_down(total) == min(count, total)
    assert math.isclose(Availability("max_unavailable", 1.0).allowed_down(total), total or 0)
