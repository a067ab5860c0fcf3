"""initial store schema: runs, units, task results, node versions, markers

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Each table (and its indexes) in the order they reference each other."""
    _create_runs()
    _create_units()
    _create_task_results()
    _create_node_services()
    _create_node_packages()
    _create_node_os()
    _create_markers()


def _create_runs() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("cloud", sa.String(200), nullable=False),
        sa.Column("workflow", sa.String(40), nullable=False),
        sa.Column("key", sa.String(1000), nullable=False),
        sa.Column("command", sa.Text, nullable=False),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("plan", sa.JSON, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("user", sa.String(100), nullable=False),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("ended_at", sa.DateTime, nullable=True),
    )
    op.create_index("ix_runs_cloud", "runs", ["cloud"])
    op.create_index("ix_runs_key", "runs", ["key"])


def _create_units() -> None:
    op.create_table(
        "units",
        sa.Column(
            "run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("unit_id", sa.String(300), primary_key=True),
        sa.Column("seq", sa.Integer, nullable=False),
        sa.Column("step", sa.String(60), nullable=False),
        sa.Column("stage", sa.String(60), nullable=False),
        sa.Column("batch", sa.String(200), nullable=True),
        sa.Column("nodes", sa.JSON, nullable=False),
        sa.Column("services", sa.JSON, nullable=False),
        sa.Column("idempotent", sa.Boolean, nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=True),
        sa.Column("ended_at", sa.DateTime, nullable=True),
    )


def _create_task_results() -> None:
    op.create_table(
        "task_results",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("unit_id", sa.String(300), nullable=False),
        sa.Column("host", sa.String(200), nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_task_results_run_unit", "task_results", ["run_id", "unit_id"])


def _create_node_services() -> None:
    op.create_table(
        "node_services",
        sa.Column("cloud", sa.String(200), primary_key=True),
        sa.Column("node", sa.String(200), primary_key=True),
        sa.Column("service", sa.String(200), primary_key=True),
        sa.Column("version", sa.String(200), nullable=True),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("run_id", sa.Integer, nullable=True),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )


def _create_node_packages() -> None:
    op.create_table(
        "node_packages",
        sa.Column("cloud", sa.String(200), primary_key=True),
        sa.Column("node", sa.String(200), primary_key=True),
        sa.Column("package", sa.String(200), primary_key=True),
        sa.Column("installed", sa.String(200), nullable=True),
        sa.Column("available", sa.String(200), nullable=True),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )


def _create_node_os() -> None:
    op.create_table(
        "node_os",
        sa.Column("cloud", sa.String(200), primary_key=True),
        sa.Column("node", sa.String(200), primary_key=True),
        sa.Column("major", sa.Integer, nullable=True),
        sa.Column("target", sa.Integer, nullable=True),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )


def _create_markers() -> None:
    op.create_table(
        "markers",
        sa.Column("cloud", sa.String(200), primary_key=True),
        sa.Column("key", sa.String(300), primary_key=True),
        sa.Column("run_id", sa.Integer, nullable=False),
        sa.Column("unit_id", sa.String(300), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
    )


def downgrade() -> None:
    for t in (
        "markers",
        "node_os",
        "node_packages",
        "node_services",
        "task_results",
        "units",
        "runs",
    ):
        op.drop_table(t)
