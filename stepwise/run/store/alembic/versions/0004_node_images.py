"""node_images: the container images discover saw on a container-style node (per service:
the reference, the digest the container runs, the digest the registry holds for it), so a
plan from the store knows which containers change as it knows which packages do

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_images",
        sa.Column("cloud", sa.String(200), primary_key=True),
        sa.Column("node", sa.String(200), primary_key=True),
        sa.Column("service", sa.String(200), primary_key=True),
        sa.Column("ref", sa.String(1000), nullable=True),
        sa.Column("running", sa.String(100), nullable=True),
        sa.Column("target", sa.String(100), nullable=True),
        sa.Column("updated_at", sa.DateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("node_images")
