"""What each step does to the cloud, in kinds an operator reads at a glance (the report colours
its bars by them): part of the vocabulary, beside the steps it classifies."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from stepwise.model.vocab import Step


class StepKind(StrEnum):
    """What a step does to the cloud, as the report colours it: takes nodes or services away
    (disruptive), changes software, checks, or acts on the whole deployment."""

    DISRUPTIVE = "disruptive"
    SOFTWARE = "software"
    CHECKS = "checks"
    DEPLOYMENT = "deployment-wide"
    #: fetches what a node installs while everything serves (before the disruptive part)
    PRESTAGE = "prestage"


#: The kind of each step (`step_kind`); a step missing here would be a KeyError in a test.
STEP_KINDS: Mapping[Step, StepKind] = MappingProxyType(
    {
        Step.PRESTAGE: StepKind.PRESTAGE,
        Step.VALIDATE: StepKind.CHECKS,
        Step.LEAVE: StepKind.DISRUPTIVE,
        Step.STOP: StepKind.DISRUPTIVE,
        Step.PACKAGES: StepKind.SOFTWARE,
        Step.CONFIG: StepKind.SOFTWARE,
        Step.REBOOT: StepKind.DISRUPTIVE,
        Step.MIGRATE: StepKind.SOFTWARE,
        Step.START: StepKind.SOFTWARE,
        Step.REJOIN: StepKind.SOFTWARE,
        Step.VERIFY: StepKind.CHECKS,
        Step.REPOS: StepKind.DEPLOYMENT,
        Step.BACKUP: StepKind.DEPLOYMENT,
        Step.RESTORE: StepKind.DEPLOYMENT,
        Step.PIN_RPC: StepKind.DEPLOYMENT,
        Step.UNPIN_RPC: StepKind.DEPLOYMENT,
        Step.CONVERGE: StepKind.DEPLOYMENT,
        Step.CONTRACT: StepKind.DEPLOYMENT,
        Step.GATE: StepKind.CHECKS,
        Step.SYSTEM_UPGRADE_PREPARE: StepKind.SOFTWARE,
        Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE: StepKind.SOFTWARE,
        Step.SYSTEM_UPGRADE_RUN: StepKind.DISRUPTIVE,
        Step.SYSTEM_UPGRADE_TRANSFER_DATA: StepKind.DEPLOYMENT,
        Step.FORM_CLUSTER: StepKind.SOFTWARE,
        Step.JOIN_CLUSTER: StepKind.SOFTWARE,
        Step.EXTERNAL_SYSTEM_UPGRADE_RUN: StepKind.DISRUPTIVE,
        Step.SYSTEM_UPGRADE_CLEANUP: StepKind.SOFTWARE,
    }
)

#: Which kind wins when one bar stands for several steps: the one an operator must notice.
KIND_ORDER: tuple[StepKind, ...] = (
    StepKind.DISRUPTIVE,
    StepKind.SOFTWARE,
    StepKind.DEPLOYMENT,
    StepKind.PRESTAGE,
    StepKind.CHECKS,
)
