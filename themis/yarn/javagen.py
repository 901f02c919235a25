"""Generates ``EngineDefaults.java``: the defaults and accepted names of the settings that
both the RM plugin and the engine know, written in Java from their one Python definition.

Why: the plugin (``ThemisSettings.java``) validates yarn-site.xml before it starts the
engine, so that a bad value stops the ResourceManager at once, with the key named; the
engine (:mod:`themis.yarn.settings`) checks the same values again. A hand-kept Java copy of
the default solver, the solver names, the fairness knob and the rest drifts from the Python
side (a Python default changes, the RM keeps passing the old one). So the Java constants
are generated from the Python ones and the result is committed, as generated protobuf code
is: ``scripts/gen-java-defaults.sh`` rewrites it, and ``tests/unit/test_javagen.py`` fails
while the committed file differs from a fresh generation.

The sources: :data:`themis.mechanism.solvers.DEFAULT_SOLVER` and ``SERVICE_SOLVERS``,
:data:`themis.mechanism.round.DEFAULT_FAIRNESS_KNOB`, the ideal-time and starvation names of
:mod:`themis.mechanism.fairness`, and the engine's settings table
:data:`themis.yarn.settings.VARIABLES` (defaults of the lease length and the app limit) with
its limits. Only settings both sides read are here: the plugin's own (agent port, TLS files,
restart back-off, ...) and the engine's own (bid timeout, gateway) stay where they are.

``python -m themis.yarn.javagen`` prints the Java source; ``--write`` writes it into this
checkout's ``rm-plugin``; ``--check`` exits with status 1 when that file is stale.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from themis.mechanism.fairness import IDEAL_TIME_NAMES, STARVATION_NAMES
from themis.mechanism.round import DEFAULT_FAIRNESS_KNOB
from themis.mechanism.solvers import DEFAULT_SOLVER, SERVICE_SOLVERS
from themis.yarn.settings import MAX_APPS, MAX_LEASE_MS, PREFIX, VARIABLES, parse_value

PACKAGE = "org.themis.yarn"
CLASS = "EngineDefaults"
#: The committed file, relative to the repository root.
JAVA_FILE = Path("rm-plugin/src/main/java/org/themis/yarn") / f"{CLASS}.java"
_WIDTH = 100  # the Java sources' line length
_NAME = re.compile(r"[A-Za-z0-9_.+:-]*")  # what a generated string may hold (no escaping)

Value = str | int | float | tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Constant:
    """One ``public static final`` field: its Java name, value and Javadoc."""

    name: str
    value: Value
    doc: str


def _default(variable: str) -> str | int | float:
    """The engine's default of ``variable`` (:data:`VARIABLES`), parsed as the engine does."""
    value = parse_value(variable, VARIABLES[variable][1])
    if not isinstance(value, str | int | float):
        raise TypeError(f"{variable}: default {value!r} is not a string or a number")
    return value


def _source(variable: str) -> str:
    """``yarn.resourcemanager.themis.<key>`` (engine: THEMIS_...), for the Javadoc."""
    return f"{{@code {PREFIX}{VARIABLES[variable][0]}}} (engine: {{@code {variable}}})"


def constants() -> list[Constant]:
    """The shared constants, in the order they are written."""
    knob = _default("THEMIS_FAIRNESS_KNOB")
    if knob != DEFAULT_FAIRNESS_KNOB or _default("THEMIS_SOLVER") != DEFAULT_SOLVER:
        raise ValueError("themis.yarn.settings.VARIABLES disagrees with the mechanism's "
                         "DEFAULT_FAIRNESS_KNOB / DEFAULT_SOLVER")
    return [
        Constant("DEFAULT_FAIRNESS_KNOB", knob,
                 f"{_source('THEMIS_FAIRNESS_KNOB')}: the fairness knob f; the (1-f) apps "
                 "with the worst rho bid in a round (paper section 3.3.2, 0.8 as in section "
                 "6.1; themis.mechanism.round.DEFAULT_FAIRNESS_KNOB). Accepted: [0, 1)."),
        Constant("DEFAULT_SOLVER", _default("THEMIS_SOLVER"),
                 f"{_source('THEMIS_SOLVER')}: the solver of the partial-allocation auction "
                 "(themis.mechanism.solvers.DEFAULT_SOLVER)."),
        Constant("SOLVERS", tuple(SERVICE_SOLVERS),
                 "The solver names the RM accepts: the chains and the back-ends whose solves "
                 "stay bounded in a long-running service "
                 "(themis.mechanism.solvers.SERVICE_SOLVERS)."),
        Constant("DEFAULT_IDEAL_TIME", _default("THEMIS_IDEAL_TIME"),
                 f"{_source('THEMIS_IDEAL_TIME')}: the form of T_id in rho (paper sections "
                 "3.2 and 4.3.1; themis.mechanism.fairness.DEFAULT_IDEAL_TIME)."),
        Constant("IDEAL_TIMES", tuple(IDEAL_TIME_NAMES),
                 "The accepted ideal-time forms (themis.mechanism.fairness.IDEAL_TIME_NAMES)."),
        Constant("DEFAULT_STARVATION", _default("THEMIS_STARVATION"),
                 f"{_source('THEMIS_STARVATION')}: how the (1-f) filter orders apps holding "
                 "no GPU (themis.mechanism.fairness.DEFAULT_STARVATION)."),
        Constant("STARVATIONS", tuple(STARVATION_NAMES),
                 "The accepted starvation orders (themis.mechanism.fairness.STARVATION_NAMES)."),
        Constant("DEFAULT_LEASE_DURATION_MS", _default("THEMIS_LEASE_MS"),
                 f"{_source('THEMIS_LEASE_MS')}: the length of a GPU lease in ms, for which "
                 "a round's outcome binds (paper section 3.3.2; "
                 "themis.yarn.settings.VARIABLES)."),
        Constant("MAX_LEASE_DURATION_MS", MAX_LEASE_MS,
                 "The longest lease the engine accepts, in ms "
                 "(themis.yarn.settings.MAX_LEASE_MS)."),
        Constant("DEFAULT_MAX_APPS", _default("THEMIS_MAX_APPS"),
                 f"{_source('THEMIS_MAX_APPS')}: apps registered with the agents' endpoint at "
                 "once; one more is refused (themis.yarn.settings.VARIABLES)."),
        Constant("MAX_APPS_LIMIT", MAX_APPS,
                 "The largest app limit the engine accepts (themis.yarn.settings.MAX_APPS)."),
    ]


def _string(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise ValueError(f"{text!r}: not a plain name (letters, digits, '_', '.', '+', '-', ':')")
    return f'"{text}"'


def _declaration(c: Constant) -> str:
    """``public static final <type> NAME = <literal>;`` (wrapped at the Java line length)."""
    v = c.value
    if isinstance(v, tuple):
        names = ", ".join(_string(s) for s in v)
        head = f"  public static final List<String> {c.name} ="
        body = f"Collections.unmodifiableList(Arrays.asList({names}));"
        if len(head) + 1 + len(body) <= _WIDTH:
            return f"{head} {body}"
        if 6 + len(body) <= _WIDTH:
            return f"{head}\n      {body}"
        args = textwrap.fill(names, _WIDTH - 10, initial_indent=" " * 10,
                             subsequent_indent=" " * 10, break_long_words=False,
                             break_on_hyphens=False)
        return (f"{head}\n      Collections.unmodifiableList(Arrays.asList(\n{args}));")
    if isinstance(v, bool):
        raise TypeError(f"{c.name}: a boolean is not a shared setting here")
    if isinstance(v, str):
        return f"  public static final String {c.name} = {_string(v)};"
    if isinstance(v, int):
        return f"  public static final long {c.name} = {v}L;"
    if not math.isfinite(v):
        raise ValueError(f"{c.name}: {v} is not a finite number")
    # repr is the shortest text that reads back as the same double, in Java as in Python
    return f"  public static final double {c.name} = {v!r};"


def _javadoc(text: str) -> str:
    lines = textwrap.wrap(text, _WIDTH - 7, break_long_words=False, break_on_hyphens=False)
    if len(lines) == 1 and len(lines[0]) <= _WIDTH - 9:
        return f"  /** {lines[0]} */"
    return "\n".join(["  /**", *(f"   * {line}" for line in lines), "   */"])


def render(shared: Sequence[Constant] | None = None) -> str:
    """The Java source of ``EngineDefaults`` (of :func:`constants` unless ``shared``)."""
    fields = "\n\n".join(f"{_javadoc(c.doc)}\n{_declaration(c)}"
                         for c in (constants() if shared is None else shared))
    return f"""\
// Generated by `python -m themis.yarn.javagen` (scripts/gen-java-defaults.sh) from the Python
// constants it names. DO NOT EDIT: change the Python side and regenerate;
// tests/unit/test_javagen.py fails while this file is stale.
package {PACKAGE};

import java.util.Arrays;
import java.util.Collections;
import java.util.List;

/**
 * The defaults and accepted names of the settings that both the plugin ({{@link ThemisSettings}},
 * which refuses a bad yarn-site.xml value before the engine starts) and the Python engine
 * ({{@code themis.yarn.settings}}, which checks the values it is passed again) know, generated
 * from their one definition on the Python side ({{@code themis.yarn.javagen}}).
 */
public final class {CLASS} {{
  private {CLASS}() {{}}

{fields}
}}
"""


def repo_file() -> Path:
    """The committed file in this checkout (the package's parent is the repository root)."""
    return Path(__file__).resolve().parents[2] / JAVA_FILE


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m themis.yarn.javagen",
        description=f"Print (or --write, or --check) the RM plugin's {CLASS}.java, the "
                    "settings' defaults and names shared with the Python engine.")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true",
                      help="write the file (default: this checkout's rm-plugin copy)")
    mode.add_argument("--check", action="store_true",
                      help="exit with status 1 when the file differs from a fresh generation")
    parser.add_argument("--file", type=Path, default=None,
                        help=f"the file --write/--check use (default: {JAVA_FILE})")
    args = parser.parse_args(argv)
    source = render()
    path: Path = args.file if args.file is not None else repo_file()
    if args.write:
        path.write_text(source, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
        return 0
    if args.check:
        current = path.read_text(encoding="utf-8") if path.is_file() else None
        if current != source:
            print(f"{path} is stale (or missing): run scripts/gen-java-defaults.sh",
                  file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
