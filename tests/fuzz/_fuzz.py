"""Shared settings and strategies of the fuzzing harness (see tests/fuzz/__init__.py)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: examples per test: a bounded run by default, THEMIS_FUZZ_EXAMPLES for the long run
LONG = int(os.environ.get("THEMIS_FUZZ_EXAMPLES", "0") or 0)


def fuzz_settings(default_examples: int) -> settings:
    return settings(
        max_examples=LONG or default_examples,
        deadline=timedelta(seconds=10),  # the hang bound, per input
        derandomize=not LONG,  # the normal suite is reproducible; the long run explores
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much, HealthCheck.large_base_example],
    )


# ------------------------------------------------------------------ hostile values
HOSTILE_TEXT = st.sampled_from([
    "", " ", "\n", "a\n", "\x00", "\t\r", "\udc80", "\ud800x", "é", "\U0001d518", "{", "}",
    "{x}", "{{", "%s", "../../etc/passwd", "a" * 300, "0", "-1", "1e400", "NaN", "null", "true",
    "&a", "*a", "!!python/object:os.system", "<<", "? ", "- ", ": ", "#", "'", '"', "\\",
])
# (Python refuses to print integers of more than 4,300 digits: longer literals are byte snippets)
HOSTILE_NUMBER = st.sampled_from([
    0, -1, 1, 2**31, 2**63, -(2**63), 10**18, 10**19, 0.0, -0.0, 1e-320, 1e18, 1e300,
    float("inf"), float("-inf"), float("nan"), 0.5, 3.0, 1048576,
]) | st.sampled_from([401, 4000]).map(lambda k: 10**k)
SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(), HOSTILE_NUMBER, st.floats(),
    st.text(max_size=20), HOSTILE_TEXT)
JSON_VALUE = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(max_size=6) | HOSTILE_TEXT, inner, max_size=4),
    max_leaves=12)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys / indices) in a JSON-like document."""
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += paths(v, (*prefix, i))
    return out


@st.composite
def mutated(draw: st.DrawFn, doc: Any, max_changes: int = 3) -> Any:
    """``doc`` with up to ``max_changes`` values replaced, keys deleted or keys added."""
    for _ in range(draw(st.integers(0, max_changes))):
        where = draw(st.sampled_from(paths(doc)))
        value = draw(JSON_VALUE)
        if not where:
            if draw(st.booleans()):
                return value
            continue
        parent = doc
        for k in where[:-1]:
            parent = parent[k]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace" or (isinstance(parent, list) and action == "add"):
            parent[where[-1]] = value
        elif action == "delete":
            del parent[where[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=6) | HOSTILE_TEXT)] = value
    return doc


@st.composite
def byte_mutations(draw: st.DrawFn, data: bytes, snippets: list[bytes]) -> bytes:
    """``data`` with up to 4 byte-level edits: flips, deletions, insertions of random
    bytes or of hostile ``snippets``."""
    out = bytearray(data)
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2, 4]))):
        pos = draw(st.integers(0, len(out)))
        kind = draw(st.sampled_from(["flip", "delete", "insert", "snippet"]))
        if kind == "flip" and pos < len(out):
            out[pos] = draw(st.integers(0, 255))
        elif kind == "delete":
            del out[pos:pos + draw(st.integers(1, 8))]
        elif kind == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        else:
            out[pos:pos] = draw(st.sampled_from(snippets))
    return bytes(out)


JSON_SNIPPETS = [b"[" * 1000, b"{" * 500, b"NaN", b"Infinity", b"-Infinity", b"1" * 401,
                 b"9" * 5000, b"1e400", b"\xff\xfe", b"\xc3\x28", b'"\\ud800"', b'"a":1,',
                 b",", b":", b"null", b"[]", b"{}", b'"\\u0000"', b"-0", b"1.5e-400"]
YAML_SNIPPETS = [b"&a ", b"*a", b"<<: *a\n", b"!!binary ", b"!!python/object:os.system ",
                 b"? ", b"- ", b": ", b"\t", b"\n  ", b"---\n", b"...\n", b"[" * 200,
                 b"{" * 200, b"9" * 5000, b".inf", b".nan", b"0x" + b"f" * 40, b"1:2:3:4:5",
                 b"2001-13-45", b"\xff", b"\xc3\x28", b"~", b"!!int ", b"!!set ", b"%YAML 1.1\n",
                 b'"\\ud800"', b"|\n  x", b"&b [*a, *a, *a, *a, *a, *a, *a, *a]"]
