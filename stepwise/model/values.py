"""Validated value types of the inputs: names that end up in plays, inventories and commands.

What comes from data and reaches Ansible is marked unsafe for templating (run/ansible_files.py)
and passed as variables; these patterns are the second wall: a package name, an address or a
node name that could hold template syntax, shell metacharacters or a second host pattern is
refused at load time, with the field and line, before anything is planned.
"""

from __future__ import annotations

import ipaddress
import re
import string
from typing import Annotated

from pydantic import AfterValidator, StringConstraints

#: an RPM/deb package name (with an optional arch or version suffix): letters, digits, . _ + -
PACKAGE_RE = r"^[A-Za-z0-9][A-Za-z0-9._+\-]*$"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(?:\.{_LABEL})*\.?$")
_DOTTED_NUMBERS = re.compile(r"^[0-9.]+$")

PackageName = Annotated[str, StringConstraints(pattern=PACKAGE_RE, max_length=200)]
#: versions and other short free text stored per node (the store's columns are 200 wide)
ShortText = Annotated[str, StringConstraints(max_length=200)]


class Unsafe(str):
    """A string that is data, never template code: the run layer writes it as `!unsafe '...'`
    (run/ansible_files.py). Defined here so that what plugs in from below (the lab's
    connector) can mark its values without importing the run layer."""


def check_address(value: str) -> str:
    """An IPv4/IPv6 address or a DNS host name (RFC 1123); anything else is refused."""
    text = value.strip()
    try:
        ipaddress.ip_address(text.strip("[]"))
        return text
    except ValueError:
        pass
    if _DOTTED_NUMBERS.fullmatch(text) or not _HOSTNAME.fullmatch(text):
        raise ValueError(
            f"'{value}' is not an IP address or a host name "
            "(letters, digits, '-' and '.'; IPv4 octets 0-255)"
        )
    return text


Address = Annotated[str, AfterValidator(check_address)]


def check_index_template(template: str) -> str:
    """A counted-node template may hold only the bare field '{index}' (no format spec, no
    conversion, no other field); '{{' and '}}' are literal braces."""
    try:
        fields = [
            (f, spec, conv)
            for _text, f, spec, conv in string.Formatter().parse(template)
            if f is not None
        ]
    except ValueError:
        fields = [("?", "", None)]
    for f, spec, conv in fields:
        if f != "index" or spec or conv:
            raise ValueError(
                f"'{template}': only '{{index}}' may appear in braces, without a format "
                "(write '{{' for a literal '{')"
            )
    return template
