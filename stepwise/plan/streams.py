"""Independent streams of a rollout part: a dependency level waits only for what it needs.

A part's services are taken in dependency levels. A single gate per level ("level k done on
every node") also makes a level wait for work it has nothing to do with: on a cloud whose
compute and storage services form separate chains, the storage chain's second link would wait
for the compute chain's first link everywhere, and the storage chain's last link would run
alone while the computes idle. So the visits of a level are split into components that share
no role and no service taken down, and each component waits only for the earlier components
it needs: those holding a service it depends on (transitively), and those working on one of
its roles or taking one of its services down (so no node is visited twice at once and no role
serial or availability allowance is shared between two streams running side by side).

When a level's visits form one component that needs everything before it (every cloud whose
services are all connected), this is exactly the one gate per level.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase
from stepwise.plan.rollout_context import Cursor, RolloutContext
from stepwise.plan.visits import Visit


@dataclass
class _Stream:
    """Work already scheduled: its roles, the services it took down or upgraded, where it
    ends, the streams it waited for to their end (directly or not), and for each of its roles
    and services the last units of its batches there, with when they end."""

    roles: set[str]
    services: set[str]
    cur: Cursor
    covers: set[int]
    ends: dict[str, tuple[set[str], float]]

    def needed(self, keys: set[str]) -> tuple[list[str], float] | None:
        """The units of this stream that work on `keys` (roles and services) and when the
        last ends; None when that is the whole stream (wait for its end)."""
        units: set[str] = set()
        t = 0.0
        for k in keys & self.ends.keys():
            us, end = self.ends[k]
            units |= us
            t = max(t, end)
        every = {u for us, _ in self.ends.values() for u in us}
        return None if units == every else (sorted(units, key=_unit_no), t)


@dataclass
class Streams:
    """The streams of one part since its start (`base`, or the last point where they all
    joined)."""

    ctx: RolloutContext
    part: Phase
    base: Cursor
    open: list[_Stream] = field(default_factory=list)

    def join(self, why: str) -> Cursor:
        """Everything scheduled so far, as one cursor (a gate when several streams end)."""
        if self.open:
            covered = {i for s in self.open for i in s.covers}
            ends = [s.cur for i, s in enumerate(self.open) if i not in covered]
            self.base = _joined(self.ctx, ends, why, self.part)
            self.open = []
        return self.base

    def schedule_level(self, visits: dict[str, list[Visit]], level: int, what: str) -> None:
        """Schedule one level's visits (role -> visits): each component after what it needs
        when that lets one start earlier, else the whole level after everything before it."""
        comps = [(comp, self._waits(comp)) for comp in components(visits)]
        t_all = max((s.cur.t for s in self.open), default=self.base.t)
        if len(self.open) > 1 or any(w.t < t_all for _, w in comps):
            for comp, w in comps:
                label = what if len(comps) == 1 else f"{self.part} level {level}: "
                if len(comps) > 1:
                    label += ", ".join(sorted(w.down))
                self._add(comp, w, level, label)
        else:
            everything = _Waits(set(range(len(self.open))), [], t_all, set())
            self._add(visits, everything, level, what)

    def _waits(self, comp: dict[str, list[Visit]]) -> _Waits:
        """What a component must wait for: whole streams, or some units of others."""
        roles = set(comp)
        down = {s for vs in comp.values() for v in vs for s in v.services}
        keys = {_role_key(r) for r in roles} | down | _needed(self.ctx.dep, down)
        whole: set[int] = set()
        partial: list[Cursor] = []
        for i, s in enumerate(self.open):
            if not (s.roles & roles or s.services & keys):
                continue
            part = s.needed(keys)
            if part is None:
                whole.add(i)
            else:
                partial.extend(Cursor(u, part[1]) for u in part[0])
        t = max([self.open[i].cur.t for i in whole] + [c.t for c in partial] + [self.base.t])
        return _Waits(whole, partial, t, down)

    def _add(self, comp: dict[str, list[Visit]], w: _Waits, level: int, label: str) -> None:
        """Schedule `comp` after its waits, as a new stream. Its roles share the allowances
        of the services they take down, but a role whose own nodes and services owe nothing
        to the work still running starts without it: the computes of a level need not wait
        for the networkers' visit of an earlier one (a service only another chain needs)."""
        names = ", ".join(sorted(w.down)) or "the level"
        why = f"{self.part} level {level}: {names} start once what they need is done"
        by_role = {r: self._waits({r: vs}) for r, vs in comp.items()} if len(comp) > 1 else {}
        if not by_role or min(rw.t for rw in by_role.values()) >= w.t:
            by_role = {r: w for r in comp}
        # roles that wait for the same work share one cursor (one gate)
        made: dict[tuple, Cursor] = {}
        curs: dict[str, Cursor] = {}
        for r, rw in by_role.items():
            key = (tuple(sorted(rw.whole)), tuple(sorted(str(c.after) for c in rw.partial)))
            if key not in made:
                made[key] = self._cursor(rw, why)
            curs[r] = made[key]
        cur = min(curs.values(), key=lambda c: c.t)
        later = {r: c for r, c in curs.items() if c is not cur}
        first = len(self.ctx.builder.units)
        end = self.ctx.schedule(comp, cur, self.part, label, role_starts=later)
        ends = _batch_ends(self.ctx, first, cur.t, {c.after: c.t for c in curs.values()})
        whole = set().union(*(rw.whole for rw in by_role.values()))
        covers = whole | {j for i in whole for j in self.open[i].covers}
        down = w.down or {s for vs in comp.values() for v in vs for s in v.services}
        self.open.append(_Stream(set(comp), down, end, covers, ends))

    def _cursor(self, w: _Waits, why: str) -> Cursor:
        """One cursor after what `w` waits for: the streams it waits for whole that no other
        of them covers, and single units of others."""
        direct = [i for i in sorted(w.whole) if not any(i in self.open[j].covers for j in w.whole)]
        waits = [self.open[i].cur for i in direct] + w.partial
        return _joined(self.ctx, waits, why, self.part) if waits else self.base


@dataclass(frozen=True)
class _Waits:
    """What a component waits for: whole streams (by index), single units of others, when
    the last of them ends, and the services it takes down."""

    whole: set[int]
    partial: list[Cursor]
    t: float
    down: set[str]


def _role_key(role: str) -> str:
    # roles and services share one key space: a role key cannot clash with a service name
    return f"role:{role}"


def _unit_no(uid: str) -> int:
    return int(uid[1:])


def _batch_ends(
    ctx: RolloutContext, first: int, t0: float, known: dict[str | None, float]
) -> dict[str, tuple[set[str], float]]:
    """Role / service -> the last unit of each batch emitted since unit number `first` that
    works there, and when the last of them ends (estimated from `t0`, or from the `known`
    end of a unit they wait for)."""
    finish: dict[str, float] = {u: t for u, t in known.items() if u is not None}
    last: dict[str, tuple[str, float]] = {}
    touched: dict[str, set[str]] = {}
    for u in ctx.builder.units[first:]:
        finish[u.id] = max((finish.get(a, t0) for a in u.after), default=t0) + u.duration_s
        if not u.batch:
            continue
        if u.batch not in last or finish[u.id] >= last[u.batch][1]:
            last[u.batch] = (u.id, finish[u.id])
        keys = touched.setdefault(u.batch, set())
        keys.update(u.services, u.stops)
        keys.update(_role_key(ctx.dep.node_by_name[n].role) for n in u.nodes[:1])
    out: dict[str, tuple[set[str], float]] = {}
    for batch, (uid, t) in last.items():
        for k in touched[batch]:
            us, end = out.setdefault(k, (set(), 0.0))
            us.add(uid)
            out[k] = (us, max(end, t))
    return out


def components(visits: dict[str, list[Visit]]) -> list[dict[str, list[Visit]]]:
    """Role -> visits split into groups that share no role and no service taken down, in the
    order of their first role."""
    parent = {r: r for r in visits}

    def find(r: str) -> str:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    holder: dict[str, str] = {}
    for role, vs in visits.items():
        for s in {s for v in vs for s in v.services}:
            if s in holder:
                parent[find(role)] = find(holder[s])
            else:
                holder[s] = role
    out: dict[str, dict[str, list[Visit]]] = {}
    for role, vs in visits.items():
        out.setdefault(find(role), {})[role] = vs
    return list(out.values())


def _needed(dep: Deployment, services: set[str]) -> set[str]:
    """What `services` depend on, transitively."""
    return set().union(*(dep.catalog.needs(s) for s in services))


def _joined(ctx: RolloutContext, curs: list[Cursor], why: str, part: Phase) -> Cursor:
    """One cursor after all of `curs` (itself when there is one)."""
    if len(curs) == 1:
        return curs[0]
    gate = ctx.builder.gate([c.after for c in curs], why, ctx.stage, part)
    return Cursor(gate, max(c.t for c in curs))
