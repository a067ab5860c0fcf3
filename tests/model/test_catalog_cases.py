"""Every built-in catalog entry renders the tasks recorded for it, per workflow, deployment
style and step (`catalog_cases/<service>.json`, as pyinfra's tests/operations/*.json): the
catalog is guarded without a lab, in a few seconds.

A deliberate change to the catalog or to how its tasks render changes these files: regenerate
them and review their diff with the change:

    .venv/bin/python -m tests.model.regen_catalog_cases
"""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from stepwise.model import Catalog, load_catalog
from tests.model.regen_catalog_cases import CASES_DIR, case_file, entry_cases

REGENERATE = "regenerate with `.venv/bin/python -m tests.model.regen_catalog_cases`"


@lru_cache(maxsize=1)
def _catalog() -> Catalog:
    return load_catalog()


def _expanded(cases: dict) -> dict[str, object]:
    """'workflow/style/step' -> tasks, a "same as WORKFLOW STYLE" replaced by what it names:
    a change shows at every place it changes, also where the file only refers to it."""
    flat = {
        f"{workflow}/{style}/{step}": tasks
        for workflow, styles in cases.items()
        if isinstance(styles, dict)
        for style, steps in styles.items()
        for step, tasks in steps.items()
    }
    for where, tasks in flat.items():
        if isinstance(tasks, str) and tasks.startswith("same as "):
            workflow, style = tasks.removeprefix("same as ").split()
            flat[where] = flat.get(f"{workflow}/{style}/{where.rsplit('/', 1)[1]}", tasks)
    return flat


def _differences(expected: dict, actual: dict) -> list[str]:
    """Where two entries' recorded cases differ: 'upgrade/kolla/stop', ... (for the message)."""
    old, new = _expanded(expected), _expanded(actual)
    return sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))


def test_every_entry_has_its_cases_and_no_file_is_stale():
    recorded = {p.stem for p in CASES_DIR.glob("*.json")}
    assert recorded == set(_catalog().services), REGENERATE


@pytest.mark.parametrize("service", sorted(p.stem for p in CASES_DIR.glob("*.json")))
def test_the_entry_renders_its_recorded_tasks(service):
    if service not in _catalog():
        pytest.skip(f"{service} is no longer in the catalog (the test above fails)")
    expected = json.loads(case_file(service).read_text())
    actual = json.loads(json.dumps(entry_cases(_catalog(), service)))
    differ = _differences(expected, actual)
    assert not differ, f"{service} renders other tasks at {', '.join(differ)}: {REGENERATE}"
    assert actual == expected, f"{service}'s file is not as regenerated: {REGENERATE}"
