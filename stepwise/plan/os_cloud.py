"""The cloud as the OS upgrade sees it (which node is where in the procedure, from the facts
and the milestones reached), and the time of a step on a node's services."""

from __future__ import annotations

from collections.abc import Callable

from stepwise.model.catalog import QUORUM_CLUSTERS, Service, node_step_seconds
from stepwise.model.deployment import Deployment, Role
from stepwise.model.facts import Facts
from stepwise.model.vocab import CatalogKey, Section, Stage, Step
from stepwise.plan import progress

WF = Section.UPGRADE
UPGRADE_TAGS = (Stage.UPGRADE,)


def is_sensitive(dep: Deployment, role: Role) -> bool:
    """Cluster- or schema-sensitive: the role runs a quorum cluster member (pacemaker, galera,
    ...) or a schema-sensitive (`rolling: false`) service. Ceph OSDs and computes are not."""
    return any(
        dep.catalog[s].cluster in QUORUM_CLUSTERS or not dep.catalog[s].rolling
        for s in role.services
    )


class OsCloud:
    """The cloud as the procedure sees it: which node is where."""

    def __init__(self, dep: Deployment, facts: Facts, chosen: set[str]):
        self.dep, self.facts, self.p = dep, facts, facts.progress
        self.roles = [r for r in dep.roles if not r.is_management and r.nodes]
        self.sensitive = [r for r in self.roles if is_sensitive(dep, r)]
        # a node's services are its role's: 10,000 nodes share a few dozen of these answers
        self._internal: dict[str, tuple[str, ...]] = {}
        self._external: dict[str, tuple[str, ...]] = {}
        self._leaving: dict[str, tuple[str, ...]] = {}
        self._packaged: dict[str, tuple[str, ...]] = {}
        self._new_os: dict[str, bool] = {}
        #: service -> the node forming its new cluster (`os_clusters.seeds`), once asked
        self.cluster_seeds: dict[str, str] | None = None
        self.first: dict[str, str] = {}
        for r in self.sensitive:
            self.first[r.name] = self._first(r, chosen)

    def _first(self, r: Role, chosen: set[str]) -> str:
        recorded = [
            m.split("=", 1)[1] for m in self.p if m.startswith(f"{progress.OS}first@{r.name}=")
        ]
        if recorded:
            return recorded[0]
        on_new = [n.name for n in r.nodes if self.new_os(n.name)]
        if on_new:
            return on_new[0]
        picked = [n.name for n in r.nodes if n.name in chosen]
        return picked[0] if picked else r.bootstrap_node.name  # type: ignore[union-attr]

    def new_os(self, n: str) -> bool:
        if n not in self._new_os:  # asked several times per node; facts and progress are fixed
            f = self.facts.of(n)
            self._new_os[n] = (
                self.facts.os_known and f.os_major >= f.os_target
            ) or progress.new_os(n) in self.p
        return self._new_os[n]

    def internal(self, n: str) -> tuple[str, ...]:
        role = self.dep.node_by_name[n].role
        if role not in self._internal:
            cat = self.dep.catalog
            self._internal[role] = tuple(s for s in self.dep.services_on(n) if not cat[s].external)
        return self._internal[role]

    def packaged(self, n: str) -> tuple[str, ...]:
        """The node's services that install packages of the new release on the new OS: not
        those in containers (their image is their package, switched by their config step)."""
        role = self.dep.node_by_name[n].role
        if role not in self._packaged:
            style, cat = self.dep.role_of(n).style, self.dep.catalog
            self._packaged[role] = tuple(
                s for s in self.internal(n) if not cat[s].in_container(style)
            )
        return self._packaged[role]

    def leaving(self, n: str) -> tuple[str, ...]:
        """The node's services that leave load balancers and clusters before they stop."""
        role = self.dep.node_by_name[n].role
        if role not in self._leaving:
            cat = self.dep.catalog
            self._leaving[role] = tuple(
                s for s in self.internal(n) if cat[s].has_step(WF, Step.LEAVE)
            )
        return self._leaving[role]

    def external(self, n: str) -> tuple[str, ...]:
        role = self.dep.node_by_name[n].role
        if role not in self._external:
            cat = self.dep.catalog
            self._external[role] = tuple(s for s in self.dep.services_on(n) if cat[s].external)
        return self._external[role]

    def prepared(self, n: str) -> bool:
        return progress.prepared(n) in self.p or self.new_os(n)

    def ext_prepared(self, n: str) -> bool:
        return not self.external(n) or progress.external_prepared(n) in self.p or self.new_os(n)

    def started(self, n: str) -> bool:
        return progress.started(n) in self.p or (not self.internal(n) and self.new_os(n))

    def ext_started(self, n: str) -> bool:
        return not self.external(n) or progress.external_started(n) in self.p

    def done(self, n: str) -> bool:
        return self.new_os(n) and self.started(n) and self.ext_started(n)

    def is_first(self, n: str) -> bool:
        return n in self.first.values()

    def all_started(self, roles: list[Role] | None = None) -> list[str]:
        """The milestones of every node (of `roles`) running the new OS and release."""
        out: list[str] = []
        for r in roles if roles is not None else self.roles:
            for n in r.nodes:
                if self.internal(n.name):
                    out.append(progress.started(n.name))
                if self.external(n.name):
                    out.append(progress.external_started(n.name))
        return out

    def per_node(self, keep: Callable[[Service], bool]) -> dict[str, tuple[str, ...]]:
        """node -> its services for which `keep(service)` holds, every node of the procedure's
        roles; computed once per role (a node's services are its role's)."""
        cat = self.dep.catalog
        out: dict[str, tuple[str, ...]] = {}
        for r in self.roles:
            kept = tuple(s for s in r.services if keep(cat[s]))
            out.update(dict.fromkeys((n.name for n in r.nodes), kept))
        return out

    def old_nodes(self, r: Role) -> list[str]:
        return [n.name for n in r.nodes if n.name != self.first[r.name] and not self.new_os(n.name)]


def secs(dep: Deployment, services, step: CatalogKey) -> float:
    """The time of `step` on a node running `services`."""
    return node_step_seconds([dep.catalog[s] for s in services], step)
