"""Secrets: which variables are secret, and how to show or store anything that holds them.

A `-e` key that looks secret (password, secret, token, key, credential, ...) keeps its value
out of every record stepwise writes or prints: the store, history, JSON, the "continue
with" hint. Only Ansible gets the value, through a private file that is removed after the run.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any, Mapping, Sequence

MASK = "****"
_SECRET = re.compile(r"pass(word|wd|phrase)?|secret|token|(^|_)key($|_)|private|credential|auth|cookie|cert",
                     re.IGNORECASE)


def is_secret_key(name: str) -> bool:
    """True for variable names whose values must never be shown or stored."""
    return bool(_SECRET.search(str(name)))


def mask_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A copy with the values of secret keys (at any depth) replaced by ****."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if is_secret_key(k):
            out[k] = MASK
        elif isinstance(v, Mapping):
            out[k] = mask_mapping(v)
        else:
            out[k] = v
    return out


def _mask_extra(text: str) -> str:
    text = text.strip()
    if text.startswith("@"):
        return text  # a file: its contents are not on the command line
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            return MASK
        return json.dumps(mask_mapping(data)) if isinstance(data, dict) else MASK
    try:
        pairs = shlex.split(text)
    except ValueError:
        return MASK
    out = []
    for pair in pairs:
        k, eq, _v = pair.partition("=")
        out.append(f"{k}={MASK}" if eq and is_secret_key(k) else pair)
    return " ".join(out)


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the values of secret `-e`/`--extra-vars` keys replaced by ****."""
    out: list[str] = []
    take = False
    for a in argv:
        if take:
            out.append(_mask_extra(a))
            take = False
        elif a in ("-e", "--extra-vars"):
            out.append(a)
            take = True
        elif a.startswith("--extra-vars="):
            out.append("--extra-vars=" + _mask_extra(a.split("=", 1)[1]))
        elif a.startswith("-e") and len(a) > 2 and not a.startswith("--"):
            out.append("-e" + _mask_extra(a[2:]))
        else:
            out.append(a)
    return out


def split_secret(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(public, secret): the top-level variables whose key looks secret go to `secret`."""
    public = {k: v for k, v in values.items() if not is_secret_key(k)}
    secret = {k: v for k, v in values.items() if is_secret_key(k)}
    return public, secret


def secret_values(values: Mapping[str, Any], secrets: Mapping[str, Any] | None = None) -> list[str]:
    """Every string that must not be shown: the values (at any depth) of secret-looking keys of
    `values`, and every value of `secrets` (given with --secret, secret whatever its name)."""
    found: list[str] = []

    def walk(v: Any, secret: bool) -> None:
        if isinstance(v, Mapping):
            for k, x in v.items():
                walk(x, secret or is_secret_key(k))
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x, secret)
        elif secret and v is not None and not isinstance(v, bool):
            found.append(str(v))

    walk(values, False)
    walk(dict(secrets or {}), True)
    return found


class Redactor:
    """Replaces known secret values in any text with ****: messages of failed tasks (a task
    may echo a password), Ansible's output, the command line. Values shorter than
    MIN_REDACTED characters cannot be told apart from ordinary text and are not searched."""

    MIN_REDACTED = 4

    def __init__(self, values: Sequence[str] = ()):
        vals = sorted({v for v in values if len(v) >= self.MIN_REDACTED}, key=len, reverse=True)
        self._re = re.compile("|".join(re.escape(v) for v in vals)) if vals else None

    def __call__(self, text: str) -> str:
        if self._re is None or not text:
            return text
        return self._re.sub(MASK, text)

    def __bool__(self) -> bool:
        return self._re is not None

    def scrub_tree(self, root: Path) -> None:
        """Mask the secret values in every file under `root` (artifacts kept after a run:
        Ansible's own output may quote what a task printed)."""
        if self._re is None:
            return
        for path in Path(root).rglob("*"):
            if path.is_file() and not path.is_symlink():
                text = path.read_text(encoding="utf-8", errors="surrogateescape")
                clean = self(text)
                if clean != text:
                    path.write_text(clean, encoding="utf-8", errors="surrogateescape")
