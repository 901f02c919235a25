"""Bounded, total parsing of untrusted documents, shared by every parser of user input.

* :func:`load_json` / :func:`load_yaml` / :func:`load_document` turn bytes into plain
  Python values (dict, list, str, int, float, bool, None) under :class:`Limits`: size in
  bytes, nesting depth, number of values (YAML aliases expanded) and number magnitude.
  Everything else is refused with one :class:`InputError` naming the field
  (``apps[3].bids[17].rho``) and the problem: bytes that are not UTF-8, JSON ``NaN`` /
  ``Infinity``, integers beyond the magnitude limit (checked on the digits, before Python
  converts them: a 5,000-digit literal costs nothing), duplicate keys (no silent last-wins),
  recursive YAML aliases, and YAML alias "bombs" (a 1 KB document expanding to gigabytes:
  the expanded size is computed on the node graph, memoised, before anything is built).
  YAML is loaded with PyYAML's safe loader (plain data only); timestamps stay strings.
* :class:`Template` is the restricted formatter for user command templates: ``{name}``
  placeholders from a known set only - no attribute or index access (``{a.__init__}``,
  ``{a[0]}``), no conversion (``{a!r}``), no format spec (so no width: ``{a:>1000000000}``
  would render a gigabyte) - checked when the template is parsed, rendered by plain
  concatenation (never ``str.format``).
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


@dataclass(frozen=True, slots=True)
class Limits:
    """What a document may contain. ``max_nodes`` = 0: no limit besides ``max_bytes``."""

    max_bytes: int = 1 << 20  # 1 MiB
    max_depth: int = 32  # nested lists/objects; the top-level value is depth 1
    max_nodes: int = 100_000  # values in the document, YAML aliases expanded
    max_number: float = 1e18  # |x| of every number (finite numbers only)

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_depth", "max_nodes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (name != "max_nodes"):
                raise ValueError(f"limit {name}={v!r} must be an integer >= "
                                 f"{int(name != 'max_nodes')}")
        if not (math.isfinite(self.max_number) and self.max_number >= 1):
            raise ValueError(f"limit max_number={self.max_number!r} must be a finite "
                             "number >= 1")


class InputError(ValueError):
    """A document breaks a limit or is malformed. ``where`` names the field (may be '')."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)
        self.where = where
        self.problem = problem


def field_path(parts: Collection[str | int]) -> str:
    """``("apps", 3, "bids", 17, "rho")`` -> ``apps[3].bids[17].rho``."""
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]+", p):
            out += f".{p}" if out else p
        else:
            out += f"[{short(p)}]"
    return out or "(top level)"


def short(value: Any, width: int = 60) -> str:
    """repr() cut to ``width`` characters (error messages stay one short line)."""
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 14]}...({len(text)} chars)"


def decode(data: bytes, limits: Limits) -> str:
    if len(data) > limits.max_bytes:
        raise InputError("", f"{len(data)} bytes exceed the size limit of {limits.max_bytes}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError("", f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                             f"{exc.start})") from None


def read_bytes(path: str | Path, limits: Limits) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``path`` (OSError as from open())."""
    with open(path, "rb") as fh:
        return fh.read(limits.max_bytes + 1)


# ----------------------------------------------------------------------------- JSON


class _Bad:
    """A JSON value refused while parsing; reported with its path after parsing."""

    __slots__ = ("problem",)

    def __init__(self, problem: str) -> None:
        self.problem = problem


class _DupDict(dict[str, Any]):
    __slots__ = ("duplicate",)
    duplicate: str


def _number_text(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:12]}...({len(text)} characters)"


def load_json(data: bytes, limits: Limits) -> Any:
    text = decode(data, limits)
    top = limits.max_number
    digits = len(str(int(top)))  # more digits: out of range, known before int() runs

    def parse_int(s: str) -> Any:
        if len(s.lstrip("-")) > digits or abs(v := int(s)) > top:
            return _Bad(f"integer {_number_text(s)} is out of range (|x| <= {top:g})")
        return v

    def parse_float(s: str) -> Any:
        v = float(s)
        if not math.isfinite(v) or abs(v) > top:
            return _Bad(f"number {_number_text(s)} is out of range (|x| <= {top:g})")
        return v

    def parse_constant(s: str) -> Any:
        return _Bad(f"{s} is not a JSON number (NaN and Infinity are refused)")

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                dup = _DupDict(out)
                dup.duplicate = k
                return dup
            out[k] = v
        return out

    try:
        doc = json.loads(text, parse_int=parse_int, parse_float=parse_float,
                         parse_constant=parse_constant, object_pairs_hook=pairs)
    except RecursionError:
        raise InputError("", f"nesting deeper than the limit of {limits.max_depth}") from None
    except json.JSONDecodeError as exc:
        raise InputError("", f"not valid JSON: {exc}") from None
    _check_tree(doc, limits)
    return doc


def _check_tree(doc: Any, limits: Limits) -> None:
    """Depth, size and refused values of a parsed JSON document (iterative)."""
    # (value, depth, parent entry, key): the path is rebuilt only for an error
    stack: list[tuple[Any, int, Any, str | int | None]] = [(doc, 1, None, None)]
    nodes = 0

    def where(entry: Any) -> str:
        parts: list[str | int] = []
        while entry is not None and entry[3] is not None:
            parts.append(entry[3])
            entry = entry[2]
        return field_path(parts[::-1])

    while stack:
        entry = stack.pop()
        value, depth = entry[0], entry[1]
        nodes += 1
        if limits.max_nodes and nodes > limits.max_nodes:
            raise InputError("", f"more than {limits.max_nodes} values")
        if isinstance(value, _Bad):
            raise InputError(where(entry), value.problem)
        if isinstance(value, dict | list):
            if depth > limits.max_depth:
                raise InputError(where(entry), f"nesting deeper than the limit of "
                                               f"{limits.max_depth}")
            if isinstance(value, _DupDict):
                raise InputError(where(entry), f"duplicate key {short(value.duplicate)}")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                if isinstance(v, dict | list | _Bad):
                    stack.append((v, depth + 1, entry, k))
                else:
                    nodes += 1


# ----------------------------------------------------------------------------- YAML

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_MERGE = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    """The safe loader with a depth-bounded composer; timestamps stay strings."""

    limit_depth = 33
    shown_depth = 32  # the limit as the user gave it (limit_depth leaves room for a scalar)

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > self.limit_depth:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise InputError(f"line {mark.line + 1}", "nesting deeper than the limit of "
                                                          f"{self.shown_depth}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _timestamp_as_text(loader: _Loader, node: yaml.Node) -> str:
    return str(loader.construct_scalar(node))  # type: ignore[arg-type]


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


def _key_name(node: yaml.Node) -> str | int:
    return str(node.value) if isinstance(node, yaml.ScalarNode) else "?"


def _check_nodes(loader: _Loader, root: yaml.Node, limits: Limits) -> None:
    """Expanded size and depth (memoised on the node graph, so a billion laughs costs its
    compressed size), recursive aliases, duplicate keys and number magnitude."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}  # nested containers in the node's subtree (a scalar: 0)
    on_path: set[int] = set()
    path: list[str | int] = []

    def where(node: yaml.Node) -> str:
        line = f"line {node.start_mark.line + 1}"
        return f"{field_path(path)} ({line})" if path else line

    def too_deep(node: yaml.Node) -> InputError:
        return InputError(where(node), f"nesting deeper than the limit of {limits.max_depth}")

    def visit(node: yaml.Node) -> tuple[int, int]:
        key = id(node)
        if key in size:  # an alias of a node already checked: its depth here may differ
            if len(on_path) + height[key] > limits.max_depth:
                raise too_deep(node)
            return size[key], height[key]
        if key in on_path:
            raise InputError(where(node), "recursive alias (a value that contains itself)")
        if not isinstance(node, yaml.ScalarNode) and len(on_path) >= limits.max_depth:
            raise too_deep(node)
        on_path.add(key)
        n, h = 1, 0
        if isinstance(node, yaml.ScalarNode):
            _check_scalar(loader, node, limits, where)
        elif isinstance(node, yaml.SequenceNode):
            h = 1
            for i, child in enumerate(node.value):
                path.append(i)
                cn, ch = visit(child)
                path.pop()
                n, h = n + cn, max(h, ch + 1)
        elif isinstance(node, yaml.MappingNode):
            h = 1
            seen: set[tuple[str, str]] = set()
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != _MERGE:
                    ident = (k.tag, k.value)
                    if ident in seen:
                        raise InputError(where(k), f"duplicate key {short(k.value)}")
                    seen.add(ident)
                path.append(_key_name(k))
                kn, kh = visit(k)
                vn, vh = visit(v)
                path.pop()
                n, h = n + kn + vn, max(h, kh + 1, vh + 1)
        on_path.discard(key)
        if limits.max_nodes and n > limits.max_nodes:
            raise InputError(where(node), f"more than {limits.max_nodes} values (aliases "
                                          "expanded)")
        size[key], height[key] = n, h
        return n, h

    visit(root)


def _check_scalar(loader: _Loader, node: yaml.ScalarNode, limits: Limits,
                  where: Any) -> None:
    top = limits.max_number
    if node.tag == _INT:
        if len(node.value) > 40:
            raise InputError(where(node), f"integer {_number_text(node.value)} is out of "
                                          f"range (|x| <= {top:g})")
        v = loader.construct_yaml_int(node)
        if abs(v) > top:
            raise InputError(where(node), f"integer {node.value} is out of range "
                                          f"(|x| <= {top:g})")
    elif node.tag == _FLOAT:
        f = loader.construct_yaml_float(node)
        if not math.isfinite(f) or abs(f) > top:
            raise InputError(where(node), f"number {_number_text(node.value)} is out of "
                                          f"range (|x| <= {top:g})")


def _one_line(what: object) -> str:
    return " ".join(str(what).split())[:300]


def load_yaml(data: bytes, limits: Limits) -> Any:
    text = decode(data, limits)
    try:
        loader = _Loader(text)  # the reader refuses unprintable characters here
    except yaml.YAMLError as exc:
        raise InputError("", f"not valid YAML: {_one_line(exc)}") from None
    loader.limit_depth = limits.max_depth + 1  # + a scalar; _check_nodes is exact
    loader.shown_depth = limits.max_depth
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _check_nodes(loader, root, limits)
        return loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f"line {mark.line + 1}" if mark is not None else ""
        raise InputError(line, f"not valid YAML: {_one_line(exc.problem or exc.context)}"
                         ) from None
    except yaml.YAMLError as exc:
        raise InputError("", f"not valid YAML: {_one_line(exc)}") from None
    except RecursionError:
        raise InputError("", f"nesting deeper than the limit of {limits.max_depth}") from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a bad !!binary
        if isinstance(exc, InputError):
            raise
        raise InputError("", f"not valid YAML: {_one_line(exc)}") from None
    finally:
        loader.dispose()


def load_document(data: bytes, *, json_only: bool, limits: Limits) -> Any:
    """JSON when ``json_only`` (``.json`` files), else YAML (a superset of JSON)."""
    return load_json(data, limits) if json_only else load_yaml(data, limits)


# ------------------------------------------------------------------------- templates

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Template:
    """A command template: literal text and ``{name}`` placeholders (``{{``/``}}`` for
    braces). Raises :class:`InputError` at construction for anything else."""

    def __init__(self, text: str, known: Collection[str], where: str = "template") -> None:
        self.text = text
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise InputError(where, f"bad placeholder syntax: {exc} (write {{{{ and }}}} "
                                    "for literal braces)") from None
        self.parts: list[tuple[str, str | None]] = []
        for literal, name, spec, conversion in parsed:
            if name is None:
                self.parts.append((literal, None))
                continue
            full = "{" + name + (f"!{conversion}" if conversion else "") + \
                (f":{spec}" if spec else "") + "}"
            if not _NAME.fullmatch(name):
                raise InputError(where, f"placeholder {short(full)}: only {{name}} is "
                                        "allowed (no attribute, index or positional access)")
            if conversion is not None or spec:
                raise InputError(where, f"placeholder {short(full)}: no conversion or format "
                                        f"spec is allowed; write {{{name}}}")
            if name not in known:
                raise InputError(where, f"unknown placeholder {{{name}}} (known: "
                                        f"{', '.join(sorted(known))})")
            self.parts.append((literal, name))
        self.names = frozenset(n for _, n in self.parts if n is not None)

    def render(self, values: Mapping[str, str]) -> str:
        """The text with every placeholder replaced by ``values[name]`` (KeyError if a
        used name is missing)."""
        return "".join(lit + (values[n] if n is not None else "") for lit, n in self.parts)
