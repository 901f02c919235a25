"""themis.safeinput: bounded JSON/YAML loading and the restricted command template."""

from __future__ import annotations

import time

import pytest

from themis.safeinput import InputError, Limits, Template, load_json, load_yaml

L = Limits()


@pytest.mark.parametrize("data, where, words", [
    (b'{"a": [1, {"b": 1' + b"0" * 401 + b"}]}", "a[1].b", "integer 100000000000"),
    (b'{"a": 1' + b"0" * 5000 + b"}", "a", "out of range"),
    (b'{"a": NaN}', "a", "NaN is not a JSON number"),
    (b'{"a": -Infinity}', "a", "-Infinity is not a JSON number"),
    (b'{"a": 1e400}', "a", "number 1e400 is out of range"),
    (b'{"a": 2e18}', "a", "out of range"),
    (b"[" * 100_000, "", "nesting deeper than the limit of 32"),
    (b"[" * 33 + b"]" * 33, "[0]", "nesting deeper than the limit of 32"),
    (b'{"x": {"a": 1, "a": 2}}', "x", "duplicate key 'a'"),
    (b'{"a": "\xff"}', "", "not UTF-8 text (byte 0xff at offset 7)"),
    (b'{"a": ', "", "not valid JSON"),
    (b" " * (L.max_bytes + 1), "", "exceed the size limit"),
])
def test_json_refusals_name_the_field(data: bytes, where: str, words: str) -> None:
    with pytest.raises(InputError) as e:
        load_json(data, L)
    assert e.value.where.startswith(where) and words in e.value.problem, str(e.value)


def test_json_accepts_plain_data_at_the_limits() -> None:
    doc = b'{"a": [1, -2.5, "x", true, null, 1000000000000000000], "b": {}}'
    assert load_json(doc, L) == {"a": [1, -2.5, "x", True, None, 10**18], "b": {}}
    assert load_json(b"[" * 32 + b"]" * 32, L) is not None


BOMB = b"".join(
    f"{k}: &{k} [{', '.join([f'*{p}'] * 9 if p else ['lol'] * 9)}]\n".encode()
    for p, k in zip(["", *"abcdefgh"], "abcdefghi", strict=True))


@pytest.mark.parametrize("data, where, words", [
    (BOMB, "f (line 6)", "more than 100000 values (aliases expanded)"),
    (b"a: &a [*a]\n", "a[0] (line 1)", "recursive alias"),
    (b"a: 1\nb: {c: 1, c: 2}\n", "b (line 2)", "duplicate key 'c'"),
    (b"a: " + b"9" * 5000 + b"\n", "a (line 1)", "is out of range"),
    (b"a: [1, 0x7fffffffffffffffff]\n", "a[1] (line 1)", "is out of range"),
    (b"a: .nan\n", "a (line 1)", "number .nan is out of range"),
    (b"a: " + b"[" * 2000 + b"\n", "line 1", "nesting deeper than the limit of 32"),
    (b"a: {b: &x [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]], c: [[[[[[[[[[[[[[[[*x]]]]]]]]]]]]]]]]}\n",
     "a.c", "nesting deeper than the limit of 32"),  # x is within it, *x in c is not
    (b"a: !!binary xx\n", "line 1", "not valid YAML"),
    (b"a: 1\n---\nb: 2\n", "line 2", "not valid YAML"),
    (b"a: \x85\n", "", "not UTF-8 text"),
    (b"\x00a: 1\n", "", "not valid YAML: unacceptable character #x0000"),
])
def test_yaml_refusals_name_the_field(data: bytes, where: str, words: str) -> None:
    t0 = time.monotonic()
    with pytest.raises(InputError) as e:
        load_yaml(data, L)
    assert time.monotonic() - t0 < 2
    assert e.value.where.startswith(where) and words in e.value.problem, str(e.value)


def test_yaml_plain_data_merges_and_dates() -> None:
    doc = b"base: &b {x: 1, y: [a, b]}\nc:\n  <<: *b\n  x: 2\nd: 2001-12-14\ne: 1.5\n"
    assert load_yaml(doc, L) == {"base": {"x": 1, "y": ["a", "b"]},
                                 "c": {"x": 2, "y": ["a", "b"]}, "d": "2001-12-14", "e": 1.5}
    assert load_yaml(b"", L) is None


@pytest.mark.parametrize("text, words", [
    ("{a!z}", "no conversion or format spec"),
    ("{a!r}", "no conversion or format spec"),
    ("{a:>1000000000}", "no conversion or format spec"),
    ("{a.__init__.__globals__}", "only {name} is allowed"),
    ("{a[0]}", "only {name} is allowed"),
    ("{}", "only {name} is allowed"),
    ("{0}", "only {name} is allowed"),
    ("{b}", "unknown placeholder {b} (known: a)"),
    ("{a", "bad placeholder syntax"),
    ("}", "bad placeholder syntax"),
])
def test_template_refuses_all_but_named_placeholders(text: str, words: str) -> None:
    with pytest.raises(InputError) as e:
        Template(text, {"a"}, "job.command")
    assert e.value.where == "job.command" and words in e.value.problem


def test_template_renders_by_concatenation() -> None:
    t = Template("x {a} {{literal}} {a}{b}", {"a", "b"})
    assert t.names == {"a", "b"}
    assert t.render({"a": "{b}", "b": "2"}) == "x {b} {literal} {b}2"


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        Limits(max_depth=0)
    with pytest.raises(ValueError, match="max_number"):
        Limits(max_number=float("inf"))
