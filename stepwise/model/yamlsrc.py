"""Load YAML keeping line numbers, so every error can name file, line and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError

from stepwise.errors import InputError, Problem


def load_yaml(path: Path) -> Any:
    """Parse one YAML file (round-trip mode, so positions are kept).

    Raises InputError naming the file and line on unreadable or malformed input.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(Problem("file not found", file=str(path),
                                 hint="check the path; relative paths are relative to the current directory")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(Problem(f"cannot read file: {exc}", file=str(path))) from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, filename: str) -> Any:
    """Parse YAML text; errors name `filename` and the line of the syntax problem."""
    yaml = YAML(typ="rt")
    try:
        return yaml.load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise InputError(Problem(f"invalid YAML: {exc.problem or exc.context}", file=filename, line=line,
                                 hint="fix the YAML syntax (indentation, quotes, colons)")) from None
    except Exception as exc:  # ruamel raises a few unmarked errors (e.g. duplicate keys)
        raise InputError(Problem(f"invalid YAML: {exc}", file=filename)) from None


def line_of(doc: Any, path: Iterable[str | int]) -> int | None:
    """1-based line of the node at `path` inside a round-trip document (best effort).

    Walks as deep as the path exists; a missing tail gives the line of its deepest parent,
    which is where an operator would add the missing field.
    """
    node = doc
    line: int | None = None
    for key in path:
        if isinstance(node, CommentedMap) and key in node:
            try:
                line = node.lc.key(key)[0] + 1
            except (KeyError, TypeError, AttributeError):
                pass
            node = node[key]
        elif isinstance(node, CommentedSeq) and isinstance(key, int) and 0 <= key < len(node):
            try:
                line = node.lc.item(key)[0] + 1
            except (KeyError, TypeError, AttributeError):
                pass
            node = node[key]
        else:
            break
    if line is None and isinstance(doc, (CommentedMap, CommentedSeq)):
        line = doc.lc.line + 1
    return line


def field_name(path: Iterable[str | int]) -> str:
    """Render a location path as an operator reads it: roles[0].nodes[2].name."""
    out = ""
    for key in path:
        if isinstance(key, int):
            out += f"[{key}]"
        else:
            out += ("." if out else "") + str(key)
    return out


def to_plain(node: Any) -> Any:
    """Convert ruamel containers to plain dicts/lists (for hashing, JSON and Ansible)."""
    if isinstance(node, dict):
        return {str(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    if hasattr(node, "value") and type(node).__module__.startswith("ruamel"):
        return node.value  # pragma: no cover - scalar wrappers
    if type(node).__module__.startswith("ruamel"):
        for base in (bool, int, float, str):
            if isinstance(node, base):
                return base(node)
    return node
