"""The choices an input declares, defined once: how a deployment upgrades its nodes' OS
(`upgrade_mode`), drains its computes (`drain_policy`) and deploys its services (`style`), and
how a catalog entry's RPC group keeps old and new code talking (`rpc_mixing`). The model
validates them, the planner and the verifier dispatch through them.
"""

from __future__ import annotations

from enum import StrEnum


class UpgradeMode(StrEnum):
    """How a node gets its new operating system."""

    IN_PLACE = "in-place"  # leapp-style: prepare downloads, the reboot upgrades
    REPROVISION = (
        "reprovision"  # the node is wiped and installed from the new image; its data is restored
    )


class DrainPolicy(StrEnum):
    """`drain_policy:` of a deployment: what a compute's leave does with an instance that
    cannot live-migrate (a PCI device, a local disk, a pinned host)."""

    REFUSE = "refuse"  # the leave fails naming it: nothing on the compute is stopped
    COLD_MIGRATE = "cold-migrate"  # moved while stopped (a reboot of the instance)
    STOP_IN_PLACE = "stop-in-place"  # stopped until the compute rejoins: announced downtime


class RpcMixing(StrEnum):
    """`rpc_mixing:` of a catalog entry in an RPC group: how its old and new code keep talking
    while both run, as the project's own upgrade guide says."""

    #: a pin in its configuration, set by the entry's `upgrade.pin` before any new code starts
    #: and lifted by `upgrade.unpin` at converge (nova's `[upgrade_levels] compute = auto`,
    #: ironic's `pin_release_version`)
    PINNED = "pinned"
    #: it caps its RPC at the oldest running peer by itself (cinder's services table,
    #: neutron-server's agents' reported resource versions): nothing to pin; an `unpin`, if
    #: any, restarts it to speak the newest once every peer runs it
    NEGOTIATED = "negotiated"
    #: it speaks its own version and is upgraded only after the peers it depends on, which
    #: negotiate (neutron's agents after every neutron-server)
    FOLLOWS = "follows"


class DeployStyle(StrEnum):
    """`style:` of a deployment or a role: how its services are deployed on a node."""

    PACKAGES = "packages"  # RPM packages behind the catalog's systemd unit
    #: podman containers run by `tripleo_<service>` units, images named as TripleO's
    #: ContainerImagePrepare names them
    TRIPLEO = "tripleo"
    KOLLA = "kolla"  # containers named after the service, kolla's image naming and tags
