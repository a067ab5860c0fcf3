"""The container styles' names (docs/catalog.md "Deployment styles"): a service's image and its
full reference, its container, its systemd unit and its container startup config, per style.

TripleO runs a service in a podman container named after it, started by the systemd unit
`tripleo_<service>`, from an image named `<name_prefix><service with - for _>` in the
ContainerImagePrepare namespace; Kolla-Ansible names the image after the service alone and
starts the container through `kolla-<service>-container`. The lab imports these names from
here, so a rehearsal and a real node agree on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from stepwise.model.choices import DeployStyle
from stepwise.model.container_specs import ContainersSpec
from stepwise.model.vocab import Section, TaskKey

#: the image name prefix a style uses when the deployment's `containers:` gives none
DEFAULT_PREFIX: Mapping[DeployStyle, str] = MappingProxyType(
    {DeployStyle.TRIPLEO: "openstack-", DeployStyle.KOLLA: ""}
)
#: where the switch writes the container's startup config ({"image": "REF@DIGEST"})
STARTUP_CONFIG: Mapping[DeployStyle, str] = MappingProxyType(
    {
        DeployStyle.TRIPLEO: "/var/lib/tripleo-config/container-startup-config/{service}.json",
        DeployStyle.KOLLA: "/etc/kolla/{service}/container.json",
    }
)
CONTAINER_STYLES = frozenset(DEFAULT_PREFIX)


@dataclass(frozen=True, slots=True)
class Containers:
    """A deployment's `containers:` block: the registry, namespace, name prefix and suffix and
    tag of its images, and the namespace a major upgrade goes to."""

    registry: str
    namespace: str
    tag: str
    name_prefix: str | None = None
    name_suffix: str = ""
    upgrade_namespace: str | None = None
    #: service -> where its own image comes from (another ContainerImagePrepare entry's)
    #: (compared, not hashed: a mapping proxy has no hash, and a frozen value must have one)
    images: Mapping[str, Containers] = field(
        default_factory=lambda: MappingProxyType({}), hash=False
    )

    @staticmethod
    def from_spec(spec: ContainersSpec) -> Containers:
        """The frozen value of a validated `containers:` block."""
        return Containers(
            spec.registry,
            spec.namespace,
            spec.tag,
            spec.name_prefix,
            spec.name_suffix,
            spec.upgrade_namespace,
            MappingProxyType(
                {
                    service: Containers(
                        src.registry, src.namespace, src.tag, src.name_prefix, src.name_suffix
                    )
                    for service, src in spec.images.items()
                }
            ),
        )

    def prefix(self, style: DeployStyle) -> str:
        """The image name prefix: the block's, else the style's default."""
        return self.name_prefix if self.name_prefix is not None else DEFAULT_PREFIX[style]


@dataclass(frozen=True, slots=True)
class StyleTasks:
    """A catalog entry's own tasks for one container style (`styles: {tripleo: ...}`): they
    replace, step by step, the ones derived from the style."""

    unit: str | None = None
    health: Mapping[str, str] | None = None
    tasks: Mapping[Section, Mapping[TaskKey, tuple[dict[str, Any], ...]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: the service runs on the host in this style (`host: true`): the entry as written
    host: bool = False


def image_name(service: str, style: DeployStyle, image: str = "") -> str:
    """The image's name without prefix and suffix: the catalog's `image:`, else the service
    name with '-' for '_' (keystone, nova-api)."""
    return image or service.replace("_", "-")


def image_ref(
    service: str,
    style: DeployStyle,
    containers: Containers,
    *,
    image: str = "",
    namespace: str | None = None,
) -> str:
    """The full reference `registry/namespace/<prefix><image><suffix>:tag` of a service's
    image: its own source when `containers.images` names it (a hotfix tag), else the block's.
    `namespace`: another release's, for a major upgrade's target, which is the block's for
    every service (a hotfix of this release is no image of the next)."""
    src = containers if namespace else containers.images.get(service, containers)
    name = src.prefix(style) + image_name(service, style, image) + src.name_suffix
    return f"{src.registry}/{namespace or src.namespace}/{name}:{src.tag}"


def container_name(service: str) -> str:
    """The container of a service: named after the service in both styles."""
    return service


def unit_name(service: str, style: DeployStyle) -> str:
    """The systemd unit that starts the service's container."""
    if style is DeployStyle.TRIPLEO:
        return f"tripleo_{service}"
    if style is DeployStyle.KOLLA:
        return f"kolla-{service}-container"
    raise ValueError(f"{style} has no container unit")


def startup_config(service: str, style: DeployStyle) -> str:
    """The file the switch writes the container's image into."""
    return STARTUP_CONFIG[style].format(service=service)
