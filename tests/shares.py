"""A property test must not pass by refusing its inputs: it counts how often an example
reached what it checks and asserts a minimum share of them at the end.

The count lives in the test function itself (the @given part is an inner function that the
test calls once), so it holds whichever tests run, in whatever order or worker: no module
counter read by a later test.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable


def assert_share(outcomes: Counter[Hashable], reached: Hashable, minimum: float) -> None:
    """At least `minimum` (0-1) of the examples counted in `outcomes` came out as `reached`."""
    total = sum(outcomes.values())
    assert total, "no example ran"
    share = outcomes[reached] / total
    assert share >= minimum, (
        f"only {outcomes[reached]} of {total} examples ({share:.0%}) were {reached!r}, "
        f"below {minimum:.0%}: the property held on too few inputs ({dict(outcomes)})"
    )
