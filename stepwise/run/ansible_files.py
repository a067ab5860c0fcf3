"""Files stepwise hands to Ansible: playbooks, inventories and variable files, written as
YAML in which every value that came from data is tagged `!unsafe`, so Ansible never renders
it as a template (a package name or an address holding `{{ lookup('pipe', ...) }}` stays text),
and the exported ansible.cfg, written only with the keys stepwise chose (`ansible_cfg`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from stepwise.errors import InputError, Problem
from stepwise.model.values import Unsafe

__all__ = [
    "ANSIBLE_CFG_KEYS",
    "Unsafe",
    "ansible_cfg",
    "plain",
    "private_dir",
    "to_yaml",
    "unsafe",
    "write_private",
]


def unsafe(value: Any) -> Any:
    """Mark every string inside `value` (keys stay plain) as data."""
    if isinstance(value, Unsafe):
        return value
    if isinstance(value, str):
        return Unsafe(value)
    if isinstance(value, Mapping):
        return {str(k): unsafe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [unsafe(v) for v in value]
    return value


def plain(value: Any) -> Any:
    """Plain dicts/lists (mapping proxies and tuples unwrapped), strings kept as they are."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # shared values are written out, not anchored
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        # a list under a key is indented below it, as ansible-lint's yaml rule (and every
        # hand-written playbook) has it; PyYAML's default writes it flush with the key
        super().increase_indent(flow, False)


_STR = "tag:yaml.org,2002:str"


def _represent_unsafe(dumper: yaml.SafeDumper, value: Unsafe) -> yaml.Node:
    # Ansible constructs an `!unsafe` scalar by resolving its text as if it were unquoted, so
    # '*', '=', 'true' or '1' would come back as something else (or fail to load). Such a
    # value cannot hold a template (no '{'): written as a quoted string, it stays text.
    text = str(value)
    if dumper.resolve(yaml.ScalarNode, text, (True, False)) != _STR:
        return dumper.represent_scalar(_STR, text, style="'")
    return dumper.represent_scalar("!unsafe", text, style="|" if "\n" in text else "'")


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # a script of several lines as a literal block, the way playbooks are written by hand
    # (PyYAML falls back to quoting where a block cannot hold the text exactly)
    return dumper.represent_scalar(_STR, value, style="|" if "\n" in value else None)


_Dumper.add_representer(Unsafe, _represent_unsafe)
_Dumper.add_representer(str, _represent_str)
_Dumper.add_multi_representer(Mapping, lambda d, v: d.represent_dict(dict(v)))
_Dumper.add_representer(tuple, lambda d, v: d.represent_list(list(v)))


def to_yaml(data: Any) -> str:
    """YAML for Ansible, `!unsafe` on data strings."""
    return yaml.dump(
        data,
        Dumper=_Dumper,
        sort_keys=False,
        width=1 << 30,
        allow_unicode=True,
        default_flow_style=False,
    )


def private_dir(path: Path) -> Path:
    """Create `path` and any missing parent as directories only their owner can enter (0700);
    directories that exist already are left as they are."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=0o700)
        except FileExistsError:
            pass  # another process made it at the same moment
    return path


def write_private(path: Path, text: str) -> Path:
    """Write a file only its owner can read, atomically (temp file + rename)."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    return path


#: the only settings stepwise writes into an ansible.cfg, by section (`ansible_cfg`)
ANSIBLE_CFG_KEYS: Mapping[str, tuple[str, ...]] = {
    "defaults": ("library", "retry_files_enabled", "interpreter_python", "connection_plugins"),
    "connection": ("pipelining",),
}

#: what ends a value or starts something else where Ansible reads ansible.cfg (configparser
#: with ';' as inline comment): a line break would start a new key or section
_CFG_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029;]")


def ansible_cfg(settings: Mapping[str, Mapping[str, str]], sources: Mapping[str, str]) -> str:
    """The text of an ansible.cfg holding `settings` (section -> key -> value). Only the keys of
    `ANSIBLE_CFG_KEYS` are written (any other is a bug: ValueError); a value that would end its
    line (a line break, a control character, ';') is refused as bad input naming where it came
    from (`sources`: key -> e.g. the environment variable), since it could add keys such as
    `vault_password_file` or `callback_plugins`. '%' is escaped: configparser interpolates."""
    lines: list[str] = []
    for section, values in settings.items():
        allowed = ANSIBLE_CFG_KEYS.get(section, ())
        if lines:
            lines.append("")
        lines.append(f"[{section}]")
        for key, value in values.items():
            if key not in allowed:
                raise ValueError(f"ansible.cfg: stepwise does not write [{section}] {key}")
            text = str(value)
            bad = _CFG_BREAKS.search(text)
            if bad or text != text.strip():
                what = f"the character {bad.group()!r}" if bad else "surrounding spaces"
                raise InputError(
                    Problem(
                        f"the value for ansible.cfg's {key} holds {what}, which would end the "
                        "setting in ansible.cfg and let the rest add settings of its own",
                        field=sources.get(key, key),
                        hint=f"give {sources.get(key, key)} as one line without ';' "
                        "(directories separated by ':')",
                    )
                )
            lines.append(f"{key} = {text.replace('%', '%%')}")
    return "\n".join(lines) + "\n"
