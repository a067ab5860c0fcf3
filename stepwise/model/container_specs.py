"""Pydantic schemas of the container styles' inputs: a deployment's `containers:` block and a
node's image facts (checked as strictly as the rest of `specs.py`, which imports them)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, str_strip_whitespace=True, allow_inf_nan=False
    )


#: an image name part (TripleO's name_prefix/name_suffix, a catalog entry's `image:`)
IMAGE_PART_RE = r"^[a-z0-9]*(?:[._-][a-z0-9]+)*[._-]?$"
#: an image namespace: path components of lowercase letters, digits and separators
NAMESPACE_RE = r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$"
#: an image tag (the OCI distribution spec's grammar)
TAG_RE = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$"
#: a registry: host[:port] (the port's range is checked by `check_registry_port`)
REGISTRY_RE = r"^[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?(?::[0-9]{1,5})?$"


class ImageSourceSpec(_Strict):
    """Where one service's image comes from when it is not the block's (`containers.images`):
    a second ContainerImagePrepare entry's `includes` (a hotfix tag, another namespace)."""

    registry: str = Field(pattern=REGISTRY_RE, max_length=255)
    namespace: str = Field(pattern=NAMESPACE_RE, max_length=255)
    #: None: the style's default (tripleo "openstack-", kolla "")
    name_prefix: str | None = Field(default=None, pattern=IMAGE_PART_RE, max_length=100)
    name_suffix: str = Field(default="", pattern=IMAGE_PART_RE, max_length=100)
    tag: str = Field(pattern=TAG_RE)

    @field_validator("registry")
    @classmethod
    def _port(cls, value: str) -> str:
        return check_registry_port(value)


class ContainersSpec(ImageSourceSpec):
    """`containers:` of a deployment: where its images come from, as TripleO's
    ContainerImagePrepare `set:` says it (`images`: the services whose image another entry
    prepares)."""

    #: the namespace of the next release's images (a major upgrade's target)
    upgrade_namespace: str | None = Field(default=None, pattern=NAMESPACE_RE, max_length=255)
    #: service -> its own image source (the block's for every service not named)
    images: dict[str, ImageSourceSpec] = Field(default_factory=dict)


def check_registry_port(registry: str) -> str:
    """A registry's port, when it has one, is a TCP port (1-65535): `host:99999` matches the
    pattern, and every pull would fail on every node."""
    _host, colon, port = registry.rpartition(":")
    if colon and port.isdigit() and not 1 <= int(port) <= 65535:
        raise ValueError(f"port {port} of registry '{registry}' is not between 1 and 65535")
    return registry


#: an image digest as registries and podman print it
DIGEST_RE = r"^sha256:[0-9a-f]{64}$"


class ImageFactSpec(_Strict):
    """A container service's image on a node: the digest its container runs (`running`), the
    registry's digest of the reference this workflow goes to (`target`) and that reference."""

    running: str | None = Field(default=None, pattern=DIGEST_RE)
    target: str | None = Field(default=None, pattern=DIGEST_RE)
    ref: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/@\-]*$", max_length=400
    )
