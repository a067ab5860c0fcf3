"""probe_samples: what an availability probe measured during a run (per target per second),
so a run's report is complete without the lab that produced it

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "probe_samples",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "run_id", sa.Integer, sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("target", sa.String(300), nullable=False),
        sa.Column("t", sa.Float, nullable=False),
        sa.Column("requests", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("max_ms", sa.Float, nullable=False),
    )
    op.create_index("ix_probe_samples_run", "probe_samples", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_probe_samples_run", "probe_samples")
    op.drop_table("probe_samples")
