"""Load YAML keeping line numbers, so every error can name file, line and field.

libyaml (through PyYAML's C loader) parses ~35x faster than a pure-Python round-trip parser
and still gives each node its position: mappings and sequences come back as dict/list
subclasses that remember the line of every key and item.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from stepwise.errors import InputError, Problem
from stepwise.model import limits
from stepwise.paths import read_input

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class YMap(dict):
    """A mapping that knows its own line and the line of each key (1-based)."""

    line: int = 0
    lines: dict

    def __init__(self) -> None:
        super().__init__()
        self.lines = {}


class YSeq(list):
    """A sequence that knows its own line and the line of each item (1-based)."""

    line: int = 0
    lines: list

    def __init__(self) -> None:
        super().__init__()
        self.lines = []


class _DuplicateKey(yaml.MarkedYAMLError):
    pass


class _Loader(_Base):  # type: ignore[misc, valid-type]
    pass


def _map(loader: Any, node: yaml.MappingNode):
    m = YMap()
    m.line = node.start_mark.line + 1
    yield m
    loader.flatten_mapping(node)
    for knode, vnode in node.value:
        if not isinstance(knode, yaml.ScalarNode):
            # a mapping or list as a key ('? [a, b]') names no field of any stepwise input
            raise _DuplicateKey(
                "while constructing a mapping",
                node.start_mark,
                "a key must be a plain value, not a mapping or a list",
                knode.start_mark,
            )
        key = loader.construct_object(knode, deep=True)
        dups = getattr(loader, "duplicates", None)
        if key in m and dups is not None:
            # Heat's and PyYAML's reading: the last one wins; the caller warns, naming both
            dups.append((key, m.lines[key], knode.start_mark.line + 1))
            del m[key]
        elif key in m:
            raise _DuplicateKey(
                "while constructing a mapping",
                node.start_mark,
                f"duplicate key '{key}' (first on line {m.lines[key]})",
                knode.start_mark,
            )
        m[key] = loader.construct_object(vnode, deep=True)
        m.lines[key] = knode.start_mark.line + 1


def _seq(loader: Any, node: yaml.SequenceNode):
    s = YSeq()
    s.line = node.start_mark.line + 1
    yield s
    for item in node.value:
        s.append(loader.construct_object(item, deep=True))
        s.lines.append(item.start_mark.line + 1)


_Loader.add_constructor("tag:yaml.org,2002:map", _map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _seq)


def load_yaml(
    path: Path | str,
    *,
    follow: bool = True,
    field: str | None = None,
    duplicates: list[tuple[Any, int, int]] | None = None,
) -> Any:
    """Parse one YAML file. Raises InputError naming the file and line on bad input.

    A key given twice in one mapping is refused, unless `duplicates` is a list: then the
    last one wins (as Heat reads its environment files) and (key, first line, last line) is
    appended to it for the caller to warn about.

    The file is read through `stepwise.paths.read_input`: a regular file only (a FIFO or a
    device is refused, never waited on), within the size limit, and not through a link when
    `follow` is False."""
    raw = read_input(
        path, field=field, limit=limits.MAX_FILE_BYTES, follow=follow, what="YAML file"
    )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            Problem(
                f"not UTF-8 text (byte {exc.start}): {exc.reason}",
                file=str(path),
                hint="save the file as UTF-8",
            )
        ) from None
    return parse_yaml(text, str(path), duplicates)


def parse_yaml(
    text: str, filename: str, duplicates: list[tuple[Any, int, int]] | None = None
) -> Any:
    """Parse YAML text within the input limits (`limits.py`); errors name `filename` and the
    line of the problem. `duplicates`: as for `load_yaml`."""
    limits.check_text_size(text, filename)
    limits.check_yaml_events(text, filename, _Base)
    try:
        if duplicates is None:
            return yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader with positions
        loader = _Loader(text)
        loader.duplicates = duplicates
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        hint = "fix the YAML syntax (indentation, quotes, colons)"
        if isinstance(exc, _DuplicateKey):
            hint = (
                "keep each key once per mapping"
                if "duplicate" in str(exc.problem)
                else "write the key as a string"
            )
        raise InputError(
            Problem(
                f"invalid YAML: {exc.problem or exc.context}", file=filename, line=line, hint=hint
            )
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(Problem(f"invalid YAML: {exc}", file=filename)) from None
    except RecursionError:  # the pure-Python loader, on a document the depth check let through
        raise InputError(Problem("invalid YAML: nested too deeply", file=filename)) from None


def line_of(doc: Any, path: Iterable[str | int]) -> int | None:
    """1-based line of the node at `path` inside a loaded document (best effort).

    Walks as deep as the path exists; a missing tail gives the line of its deepest parent,
    which is where an operator would add the missing field.
    """
    node = doc
    line: int | None = getattr(doc, "line", None) or None
    for key in path:
        if isinstance(node, YMap) and key in node:
            line = node.lines.get(key, line)
            node = node[key]
        elif isinstance(node, YSeq) and isinstance(key, int) and 0 <= key < len(node):
            line = node.lines[key]
            node = node[key]
        else:
            break
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
    """Plain dicts/lists (for hashing, JSON and Ansible)."""
    if isinstance(node, dict):
        return {str(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    return node
