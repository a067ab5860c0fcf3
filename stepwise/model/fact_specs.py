"""Pydantic schema of a facts file: what discovery (or the operator) says each node runs and
can get, checked strictly; `facts.py` turns it into the values the planner reads."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from stepwise.model.container_specs import ImageFactSpec
from stepwise.model.specs import NAME_RE, Strict
from stepwise.model.values import PackageName, ShortText


class PackageFactSpec(Strict):
    installed: ShortText | None = None
    available: ShortText | None = None


class OsFactSpec(Strict):
    major: int | None = None
    target: int | None = None


class ConfigFactSpec(Strict):
    """A service's configuration on a node: the hash of what it runs with (`current`) and of
    what the deployment rendered for it (`rendered`); they differ when the configuration
    changed and the service must restart to read it."""

    current: ShortText | None = None
    rendered: ShortText | None = None


class NodeFactsSpec(Strict):
    os: OsFactSpec | None = None
    packages: dict[PackageName, PackageFactSpec] = Field(default_factory=dict)
    config: dict[
        Annotated[str, StringConstraints(pattern=NAME_RE, max_length=200)], ConfigFactSpec
    ] = Field(default_factory=dict)
    images: dict[
        Annotated[str, StringConstraints(pattern=NAME_RE, max_length=200)], ImageFactSpec
    ] = Field(default_factory=dict)


class FactsSpec(Strict):
    defaults: NodeFactsSpec | None = None
    nodes: dict[str, NodeFactsSpec] = Field(default_factory=dict)
    #: milestones of a multi-command procedure reached so far (stepwise.plan.progress), e.g.
    #: `os:transferred@Database`; normally recorded by stepwise's runs in the store
    progress: list[str] = Field(default_factory=list)
