"""Secrets: which variables are secret, and how to show or store anything that holds them.

A `-e` key that looks secret (password, secret, token, key, credential, ...) keeps its value
out of every record stepwise writes or prints: the store, history, JSON, the "continue
with" hint. Only Ansible gets the value, through a private file that is removed after the run.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MASK = "****"
_SECRET = re.compile(
    r"pass(word|wd|phrase)?|secret|token|(^|_)key($|_)|private|credential|auth|cookie|cert",
    re.IGNORECASE,
)


def is_secret_key(name: str) -> bool:
    """True for variable names whose values must never be shown or stored."""
    return bool(_SECRET.search(str(name)))


def mask_value(value: Any) -> Any:
    """A copy of `value` with the values of secret keys replaced by ****, at any depth: in
    mappings, and in mappings inside lists (`{"users": [{"password": ...}]}`)."""
    if isinstance(value, Mapping):
        return {k: MASK if is_secret_key(k) else mask_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_value(v) for v in value]
    return value


#: the password of a URL (`postgresql+psycopg://user:pw@host/db`, a `--store`)
_URL_PASSWORD = re.compile(r"(://[^/:@\s]*:)([^@\s]+)(@)")
#: a cluster of short options that ends with -e: `-e`, `-ve`, `-yeKEY=v` (click reads every
#: letter before the `e` as a flag, and what follows it, or the next argument, as -e's value)
_SHORT_E = re.compile(r"-([A-Za-z]*?)e(.*)", re.DOTALL)


def _mask_extra(text: str, found: list[str]) -> str:
    stripped = text.strip()
    if stripped.startswith("@"):
        return text  # a file: its contents are not on the command line
    if stripped.startswith(("{", "[")):
        try:
            data = json.loads(stripped)
        except (ValueError, RecursionError):
            found.append(text)
            return MASK
        found.extend(secret_values({"_": data}))
        return json.dumps(mask_value(data))
    try:
        pairs = shlex.split(stripped)
    except ValueError:
        found.append(text)
        return MASK
    out = []
    for pair in pairs:
        k, eq, v = pair.partition("=")
        if eq and is_secret_key(k):
            found.append(v)
            out.append(f"{k}={MASK}")
        else:
            out.append(pair)
    return " ".join(out)


def _mask_url(arg: str, found: list[str]) -> str:
    found.extend(m.group(2) for m in _URL_PASSWORD.finditer(arg))
    return _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), arg)


def _walk_argv(argv: Sequence[str], found: list[str]) -> list[str]:
    out: list[str] = []
    take = False
    for a in argv:
        if take:
            out.append(_mask_extra(a, found))
            take = False
            continue
        short = _SHORT_E.fullmatch(a) if not a.startswith("--") else None
        if a == "--extra-vars":
            out.append(a)
            take = True
        elif a.startswith("--extra-vars="):
            out.append("--extra-vars=" + _mask_extra(a.split("=", 1)[1], found))
        elif short is not None:
            flags, rest = short.groups()
            if rest:
                out.append(f"-{flags}e" + _mask_extra(rest, found))
            else:
                out.append(a)
                take = True
        else:
            out.append(_mask_url(a, found))
    return out


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A command line with the values of secret `-e`/`--extra-vars` keys replaced by ****
    (every form: `-e K=V`, `-eK=V`, `-ve K=V`, `--extra-vars=...`, JSON at any depth, lists
    included), and the password of any URL (a `--store`)."""
    return _walk_argv(argv, [])


def argv_secrets(argv: Sequence[str]) -> list[str]:
    """The values `mask_argv` hides: what must not appear anywhere else either (a traceback
    may quote them)."""
    found: list[str] = []
    _walk_argv(argv, found)
    return [v for v in found if v]


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


#: every secret value a Redactor of this process was given (`--secret` values included):
#: the crash log masks them in the traceback as well as in the command line
_KNOWN: set[str] = set()


def known_secrets() -> list[str]:
    """The secret values this process has seen (for the crash log)."""
    return sorted(_KNOWN)


class Redactor:
    """Replaces known secret values in any text with ****: messages of failed tasks (a task
    may echo a password), Ansible's output, the command line. Values shorter than
    MIN_REDACTED characters cannot be told apart from ordinary text and are not searched."""

    MIN_REDACTED = 4

    def __init__(self, values: Sequence[str] = ()):
        vals = sorted({v for v in values if len(v) >= self.MIN_REDACTED}, key=len, reverse=True)
        _KNOWN.update(vals)  # a crash log written later in this process hides them too
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
