"""What the store knows of the cloud across runs: markers (once-only operations and the
milestones of a multi-command procedure), what runs where, and the nodes' facts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, select

from stepwise.model.vocab import MarkerState, ServiceState
from stepwise.run.store.base import StoreBase, now, redact
from stepwise.run.store.checked import one
from stepwise.run.store.models import (
    MarkerRow,
    NodeImageRow,
    NodeOsRow,
    NodePackageRow,
    NodeServiceRow,
)

#: marker keys of progress milestones (the other markers guard once-only units)
PROGRESS = "progress:"


class CloudRecords(StoreBase):
    """Markers, progress milestones, node services and node facts of a cloud."""

    # -- markers (once-only operations) ---------------------------------------------------
    def marker(self, cloud: str, key: str) -> MarkerRow | None:
        with self.reading() as s:
            return one(s.get(MarkerRow, (cloud, key)), redact(self.url))

    def set_marker(
        self, cloud: str, key: str, run_id: int, unit_id: str, state: MarkerState
    ) -> None:
        with self.session() as s:
            row = s.get(MarkerRow, (cloud, key))
            if row is None:
                s.add(
                    MarkerRow(
                        cloud=cloud, key=key, run_id=run_id, unit_id=unit_id, state=state, at=now()
                    )
                )
            else:
                row.run_id, row.unit_id, row.state, row.at = run_id, unit_id, state, now()

    def progress(self, cloud: str) -> frozenset[str]:
        """The milestones reached on this cloud (stepwise.plan.progress)."""
        with self.reading() as s:
            rows = self._checked(
                s.scalars(
                    select(MarkerRow).where(
                        MarkerRow.cloud == cloud, MarkerRow.key.like(PROGRESS + "%")
                    )
                )
            )
            return frozenset(r.key[len(PROGRESS) :] for r in rows)

    def record_progress(
        self,
        cloud: str,
        run_id: int,
        unit_id: str,
        marks: Iterable[str],
        clears: Iterable[str] = (),
    ) -> None:
        """Add milestones a unit reached and forget those it ended (by prefix), at once."""
        with self.session() as s:
            for prefix in clears:
                s.execute(
                    delete(MarkerRow).where(
                        MarkerRow.cloud == cloud, MarkerRow.key.like(PROGRESS + prefix + "%")
                    )
                )
            for m in marks:
                key = PROGRESS + m
                row = s.get(MarkerRow, (cloud, key))
                if row is None:
                    s.add(
                        MarkerRow(
                            cloud=cloud,
                            key=key,
                            run_id=run_id,
                            unit_id=unit_id,
                            state=MarkerState.DONE,
                            at=now(),
                        )
                    )

    def clear_marker(self, cloud: str, key: str) -> None:
        with self.session() as s:
            s.execute(delete(MarkerRow).where(MarkerRow.cloud == cloud, MarkerRow.key == key))

    # -- what runs where ------------------------------------------------------------------
    def set_services(
        self,
        cloud: str,
        pairs: Iterable[tuple[str, str]],
        version: str | None = None,
        state: ServiceState | None = None,
        run_id: int | None = None,
        versions: Mapping[tuple[str, str], str | None] | None = None,
    ) -> None:
        """Update version and/or state of (node, service) pairs; `versions` gives per-pair
        versions."""
        with self.session() as s:
            for node, service in pairs:
                row = s.get(NodeServiceRow, (cloud, node, service))
                if row is None:
                    row = NodeServiceRow(
                        cloud=cloud,
                        node=node,
                        service=service,
                        version=None,
                        state=ServiceState.UNKNOWN,
                        updated_at=now(),
                    )
                    s.add(row)
                v = versions.get((node, service), version) if versions is not None else version
                if v is not None:
                    row.version = v
                if state is not None:
                    row.state = state
                if run_id is not None:
                    row.run_id = run_id
                row.updated_at = now()

    def node_services(self, cloud: str) -> list[NodeServiceRow]:
        with self.reading() as s:
            return self._checked(
                s.scalars(
                    select(NodeServiceRow)
                    .where(NodeServiceRow.cloud == cloud)
                    .order_by(NodeServiceRow.node, NodeServiceRow.service)
                )
            )

    # -- facts (discover) -----------------------------------------------------------------
    def save_facts(self, cloud: str, facts: Mapping[str, Any]) -> None:
        """Store facts in the FactsSpec shape ({nodes: {node: {os, packages}}}), replacing what
        was known about the nodes it names."""
        with self.session() as s:
            for node, nf in (facts.get("nodes") or {}).items():
                s.execute(
                    delete(NodePackageRow).where(
                        NodePackageRow.cloud == cloud, NodePackageRow.node == node
                    )
                )
                for pkg, pf in (nf.get("packages") or {}).items():
                    s.add(
                        NodePackageRow(
                            cloud=cloud,
                            node=node,
                            package=pkg,
                            installed=pf.get("installed"),
                            available=pf.get("available"),
                            updated_at=now(),
                        )
                    )
                _replace_images(s, cloud, node, nf.get("images") or {})
                os_ = nf.get("os") or {}
                row = s.get(NodeOsRow, (cloud, node))
                if row is None:
                    s.add(
                        NodeOsRow(
                            cloud=cloud,
                            node=node,
                            major=os_.get("major"),
                            target=os_.get("target"),
                            updated_at=now(),
                        )
                    )
                else:
                    row.major, row.target, row.updated_at = (
                        os_.get("major"),
                        os_.get("target"),
                        now(),
                    )

    def forget_nodes_except(self, cloud: str, names: Iterable[str]) -> list[str]:
        """Forget the facts of the cloud's nodes not in `names` (nodes the deployment no
        longer has); returns the nodes forgotten."""
        keep = set(names)
        tables = (NodePackageRow, NodeOsRow, NodeImageRow)
        with self.session() as s:
            gone = sorted(
                {n for t in tables for n in s.scalars(select(t.node).where(t.cloud == cloud))}
                - keep
            )
            for t in tables if gone else ():
                s.execute(delete(t).where(t.cloud == cloud, t.node.in_(gone)))
        return gone

    def facts(self, cloud: str) -> dict[str, Any] | None:
        """The stored facts in the FactsSpec shape, or None when `discover` never ran."""
        with self.reading() as s:
            pkgs = self._checked(
                s.scalars(select(NodePackageRow).where(NodePackageRow.cloud == cloud))
            )
            oses = self._checked(s.scalars(select(NodeOsRow).where(NodeOsRow.cloud == cloud)))
            images = self._checked(
                s.scalars(select(NodeImageRow).where(NodeImageRow.cloud == cloud))
            )
        if not pkgs and not oses and not images:  # images alone are facts too
            return None
        nodes: dict[str, dict[str, Any]] = {}
        for im in images:
            entry = nodes.setdefault(im.node, {"packages": {}})
            entry.setdefault("images", {})[im.service] = {
                k: v
                for k, v in (("running", im.running), ("target", im.target), ("ref", im.ref))
                if v is not None
            }
        for o in oses:
            entry = nodes.setdefault(o.node, {"packages": {}})
            os_ = {k: v for k, v in (("major", o.major), ("target", o.target)) if v is not None}
            if os_:
                entry["os"] = os_
        for p in pkgs:
            entry = nodes.setdefault(p.node, {"packages": {}})
            entry["packages"][p.package] = {
                k: v
                for k, v in (("installed", p.installed), ("available", p.available))
                if v is not None
            }
        return {"nodes": dict(sorted(nodes.items()))}

    def update_node_facts(self, cloud: str, node: str, facts: Mapping[str, Any]) -> None:
        """Merge one node's facts (FactsSpec node shape) into what is known: the packages it
        names and its OS major; the rest stays."""
        with self.session() as s:
            for pkg, pf in (facts.get("packages") or {}).items():
                if not pf or (pf.get("installed") is None and pf.get("available") is None):
                    continue  # the node does not know this package: that is no fact
                row = s.get(NodePackageRow, (cloud, node, pkg))
                if row is None:
                    s.add(
                        NodePackageRow(
                            cloud=cloud,
                            node=node,
                            package=pkg,
                            installed=pf.get("installed"),
                            available=pf.get("available"),
                            updated_at=now(),
                        )
                    )
                else:
                    row.installed, row.available, row.updated_at = (
                        pf.get("installed"),
                        pf.get("available"),
                        now(),
                    )
            major = (facts.get("os") or {}).get("major")
            if major is not None:
                row = s.get(NodeOsRow, (cloud, node))
                if row is None:
                    s.add(
                        NodeOsRow(
                            cloud=cloud, node=node, major=major, target=None, updated_at=now()
                        )
                    )
                else:
                    row.major, row.updated_at = major, now()

    def mark_installed(self, cloud: str, node: str, packages: Iterable[str]) -> None:
        """After a successful packages step: what was available is now installed."""
        with self.session() as s:
            for pkg in packages:
                row = s.get(NodePackageRow, (cloud, node, pkg))
                if row is not None and row.available:
                    row.installed, row.updated_at = row.available, now()

    def installed_version(self, cloud: str, node: str, package: str) -> str | None:
        with self.reading() as s:
            row = one(s.get(NodePackageRow, (cloud, node, package)), redact(self.url))
            return row.installed if row else None


def _replace_images(s: Any, cloud: str, node: str, images: Mapping[str, Any]) -> None:
    """What discover saw of a node's images replaces what was known of them."""
    s.execute(delete(NodeImageRow).where(NodeImageRow.cloud == cloud, NodeImageRow.node == node))
    for service, im in images.items():
        s.add(
            NodeImageRow(
                cloud=cloud,
                node=node,
                service=service,
                ref=im.get("ref"),
                running=im.get("running"),
                target=im.get("target"),
                updated_at=now(),
            )
        )
