"""The state store's tables. The schema is owned by Alembic (`alembic/versions`); these
classes must match the latest migration (a test checks that they do)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from stepwise.model.vocab import RunState, ServiceState, UnitState


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    """One invocation of a workflow (a resume continues the same run)."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    cloud: Mapped[str] = mapped_column(String(200), index=True)
    workflow: Mapped[str] = mapped_column(String(40))
    #: what identifies "the same command" for resume: workflow, stage, plane, limit, tags
    key: Mapped[str] = mapped_column(String(1000), index=True)
    command: Mapped[str] = mapped_column(Text, default="")
    params: Mapped[dict] = mapped_column(JSON, default=dict)
    plan: Mapped[dict] = mapped_column(JSON, default=dict)
    #: the facts the plan was made from (facts-file shape), for an exact rebuild on resume
    facts: Mapped[dict | None] = mapped_column(JSON, nullable=True)
    #: running | done | failed | interrupted
    status: Mapped[str] = mapped_column(String(20), default=RunState.RUNNING)
    message: Mapped[str] = mapped_column(Text, default="")
    user: Mapped[str] = mapped_column(String(100), default="")
    host: Mapped[str] = mapped_column(String(200), default="")
    pid: Mapped[int] = mapped_column(Integer, default=0)
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[datetime] = mapped_column(DateTime)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class UnitRow(Base):
    """The state of one plan unit within a run."""

    __tablename__ = "units"

    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    unit_id: Mapped[str] = mapped_column(String(300), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    step: Mapped[str] = mapped_column(String(60))
    stage: Mapped[str] = mapped_column(String(60), default="")
    batch: Mapped[str | None] = mapped_column(String(200), nullable=True)
    nodes: Mapped[list] = mapped_column(JSON, default=list)
    services: Mapped[list] = mapped_column(JSON, default=list)
    idempotent: Mapped[bool] = mapped_column(Boolean, default=True)
    #: pending | running | done | failed | interrupted | skipped
    state: Mapped[str] = mapped_column(String(20), default=UnitState.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    message: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)


class TaskResultRow(Base):
    """One task on one host (Ansible's per-host result)."""

    __tablename__ = "task_results"
    __table_args__ = (Index("ix_task_results_run_unit", "run_id", "unit_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    unit_id: Mapped[str] = mapped_column(String(300))
    host: Mapped[str] = mapped_column(String(200))
    task: Mapped[str] = mapped_column(Text)
    #: ok | changed | failed | unreachable | skipped | ignored
    status: Mapped[str] = mapped_column(String(20))
    duration_s: Mapped[float] = mapped_column(Float, default=0.0)
    message: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(DateTime)


class NodeServiceRow(Base):
    """What version of a service a node runs, and in what state (from discover and runs)."""

    __tablename__ = "node_services"

    cloud: Mapped[str] = mapped_column(String(200), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    service: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[str | None] = mapped_column(String(200), nullable=True)
    #: running | stopped | out (left its clusters) | unknown
    state: Mapped[str] = mapped_column(String(20), default=ServiceState.UNKNOWN)
    run_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class NodePackageRow(Base):
    """Installed and available versions of a package on a node (what `discover` found)."""

    __tablename__ = "node_packages"

    cloud: Mapped[str] = mapped_column(String(200), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    package: Mapped[str] = mapped_column(String(200), primary_key=True)
    installed: Mapped[str | None] = mapped_column(String(200), nullable=True)
    available: Mapped[str | None] = mapped_column(String(200), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class NodeOsRow(Base):
    """OS major version of a node and the target major (what `discover` found)."""

    __tablename__ = "node_os"

    cloud: Mapped[str] = mapped_column(String(200), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    major: Mapped[int | None] = mapped_column(Integer, nullable=True)
    target: Mapped[int | None] = mapped_column(Integer, nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class NodeImageRow(Base):
    """A container-style node's image of one service (what `discover` found): the reference
    the target names, the digest the container runs, the registry's digest of the reference."""

    __tablename__ = "node_images"

    cloud: Mapped[str] = mapped_column(String(200), primary_key=True)
    node: Mapped[str] = mapped_column(String(200), primary_key=True)
    service: Mapped[str] = mapped_column(String(200), primary_key=True)
    ref: Mapped[str | None] = mapped_column(String(1000), nullable=True)
    running: Mapped[str | None] = mapped_column(String(100), nullable=True)
    target: Mapped[str | None] = mapped_column(String(100), nullable=True)
    updated_at: Mapped[datetime] = mapped_column(DateTime)


class MarkerRow(Base):
    """Once-only operations that happened on a cloud (data transfer to a node): outlives runs,
    so a later run refuses to do them again."""

    __tablename__ = "markers"

    cloud: Mapped[str] = mapped_column(String(200), primary_key=True)
    key: Mapped[str] = mapped_column(String(300), primary_key=True)
    run_id: Mapped[int] = mapped_column(Integer)
    unit_id: Mapped[str] = mapped_column(String(300))
    #: started | done
    state: Mapped[str] = mapped_column(String(20))
    at: Mapped[datetime] = mapped_column(DateTime)


class ProbeSampleRow(Base):
    """What an availability probe measured on one target during one second of a run (the lab's
    probe; raw requests are aggregated: a 2-hour run is ~7,000 rows per target, not 36,000)."""

    __tablename__ = "probe_samples"
    __table_args__ = (Index("ix_probe_samples_run", "run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    #: "vip:<service>" or "workload:<vm>"
    target: Mapped[str] = mapped_column(String(300))
    #: the second's start, epoch seconds
    t: Mapped[float] = mapped_column(Float)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    max_ms: Mapped[float] = mapped_column(Float, default=0.0)
