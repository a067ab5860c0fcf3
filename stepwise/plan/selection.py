"""What part of a workflow the operator asked for (`Selection`), as a value of its own: the
workflow table types its planners with it and the commands build it, and neither may import
the selection rules (`select.py`), which read the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from stepwise.model.vocab import Plane, Stage


def split_list(values: Iterable[str] | str | None) -> tuple[str, ...]:
    """`--tags a,b --tags c` -> (a, b, c)."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    out: list[str] = []
    for v in values:
        out.extend(p.strip() for p in str(v).split(",") if p.strip())
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class Selection:
    """What part of a workflow the operator asked for."""

    limit: str | None = None
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    stage: Stage | None = None
    plane: Plane | None = None
    #: True: only the seed's `external-upgrade run` operations; False: only `upgrade run` ones
    external: bool | None = None
    #: a rollback: the run whose changes it takes back (`--run N`)
    of_run: int | None = None
    #: the prestage stage, at most this many nodes fetching at once; 0: no prestage stage
    prestage: int = 0

    def params(self) -> dict[str, object]:
        out: dict[str, object] = {
            "limit": self.limit,
            "tags": list(self.tags),
            "skip_tags": list(self.skip_tags),
            "stage": str(self.stage) if self.stage else None,
            "plane": str(self.plane) if self.plane else None,
            "external": self.external,
        }
        if self.of_run is not None:  # only a rollback has it: other plans keep their params
            out["of_run"] = self.of_run
        if self.prestage:  # only a plan with a prestage stage: --no-prestage keeps today's
            out["prestage"] = self.prestage
        return out
