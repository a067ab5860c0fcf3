"""What one client probe run created and has not deleted yet, and how it is cleaned up.

Part of the client probe script (client_probe.py imports it from beside itself when the
client venv's python runs it; like the script it needs nothing but the standard library).
Every resource is named `<prefix><kind>-<n>`. A create that gives no answer (a service
stopped under the call, the probe's own stop) may have landed all the same: its name stays
pending until a listing shows it (then it is deleted like any other) or, LOST_AFTER seconds
after the call ended, still does not (it never landed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: how long an interrupted create may take to land on the server before the second sweep
SETTLE_SECONDS = 1.5
#: a create whose answer was lost and that a listing this long after still does not show never
#: landed (the service died before committing it)
LOST_AFTER = 10.0

#: (id, name) of every resource of the kind the cloud shows
Listing = Callable[[], list[tuple[str, str]]]
#: deletes one id (`ignore_missing=True` is passed)
Delete = Callable[..., Any]


class Ledger:
    """The ids created and not yet deleted, by kind, and the names whose create was lost."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.count = 0
        self.known: dict[str, set[str]] = {}
        self.pending: dict[str, tuple[str, float]] = {}  # name -> (kind, when its call ended)
        self.calls: dict[str, tuple[Listing, Delete]] = {}

    def kind(self, kind: str, listing: Listing, delete: Delete) -> None:
        """Declare a kind of resource: how the cloud lists it, how one is deleted."""
        self.calls[kind] = (listing, delete)
        self.known.setdefault(kind, set())

    def name(self, kind: str) -> str:
        self.count += 1
        return f"{self.prefix}{kind}-{self.count}"

    def create(self, kind: str, make: Callable[[str], Any]) -> Any:
        """`make(name)` with a new name; the made resource's id is known until `gone`."""
        name = self.name(kind)
        try:
            made = make(name)
        except BaseException:  # the probe's stop too: its cleanup looks for the name
            self.pending[name] = (kind, time.monotonic())
            raise
        self.known[kind].add(made.id)
        return made

    def gone(self, kind: str, rid: str) -> None:
        self.known[kind].discard(rid)

    def find_lost(self) -> None:
        """Look for the pending names (one listing per kind): one that landed joins the ids
        to delete; one that a listing LOST_AFTER seconds after its call does not show is
        forgotten."""
        for kind in sorted({k for k, _ in self.pending.values()}):
            asked = time.monotonic()
            try:
                found = {name: rid for rid, name in self.calls[kind][0]()}
            except Exception:
                continue  # still down: the next round looks again
            for name, (k, since) in list(self.pending.items()):
                if k == kind and name in found:
                    self.known[kind].add(found[name])
                    del self.pending[name]
                elif k == kind and asked - since > LOST_AFTER:
                    del self.pending[name]

    def retry_deletes(
        self, most: int = 5, keep: frozenset[str] = frozenset()
    ) -> list[tuple[str, str]]:
        """Delete again what failed rounds left, quietly, a few of each kind a round, so the
        leftovers go once the service is back; `keep`: ids a call still watches. The (kind,
        id) whose delete the cloud took."""
        if self.pending:
            self.find_lost()
        taken = []
        for kind, (_listing, delete) in self.calls.items():
            known = self.known[kind]
            for rid in sorted(known - keep)[:most]:
                try:
                    delete(rid, ignore_missing=True)
                    known.discard(rid)
                    taken.append((kind, rid))
                except Exception:
                    break  # still down: the next round tries again
        return taken

    def sweep(self, kind: str, deadline: float) -> bool:
        """Delete the kind's known ids and whatever its listing shows with the prefix; whether
        the listing answered (a service down: only the known ids were tried)."""
        listing, delete = self.calls[kind]
        known = self.known[kind]
        listed = True
        try:
            known.update(rid for rid, name in listing() if (name or "").startswith(self.prefix))
        except Exception:
            listed = False
        for rid in sorted(known):
            if time.monotonic() > deadline:
                break
            try:
                delete(rid, ignore_missing=True)
                known.discard(rid)
            except Exception:
                pass
        return listed

    def cleanup(self, deadline: float) -> list[str]:
        """Delete everything of this run: sweeps until nothing is left or `deadline`; the ids
        left behind."""
        # a create in flight at the stop may still be committing on the server when the first
        # sweep lists (its answer lost, its row not there yet): a second sweep finds it
        settle = bool(self.pending)
        sweeps = 0
        while True:
            listed = all([self.sweep(kind, deadline) for kind in self.calls])
            sweeps += 1
            left = sorted(rid for known in self.known.values() for rid in known)
            done = not left and (not settle or (listed and sweeps > 1))
            if done or time.monotonic() >= deadline:
                return left
            time.sleep(max(0.0, min(SETTLE_SECONDS, deadline - time.monotonic())))
