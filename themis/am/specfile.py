"""Reading an app spec file: :func:`load_spec` reads a YAML (or JSON) file with
:func:`themis.docfile.read_document` and builds its :class:`~themis.am.spec.AppSpec` with
:func:`~themis.am.spec.parse_spec`; a file in the older standalone format
(:mod:`themis.am.legacy`) is converted, with a deprecation message. This is what
``themis submit`` / ``job run`` and standalone read spec files with.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path

from themis.am.legacy import convert_standalone, is_old_standalone, old_path
from themis.am.spec import AppSpec, parse_spec
from themis.am.speccheck import SpecError
from themis.docfile import DocumentError, read_document

__all__ = ["load_spec"]


def load_spec(path: str | Path, default_name: str | None = None,
              warn: Callable[[str], None] | None = None) -> AppSpec:
    """Read a YAML (or JSON) spec file and validate it. A file in the older standalone
    format is converted, with a deprecation message to ``warn`` (default: stderr) that
    names the one-line conversion command; its problems name the fields as written."""
    source = repr(str(path))
    try:
        raw = read_document(path)
    except DocumentError as exc:
        raise SpecError([("(file)", exc.problem)], source) from None
    if not is_old_standalone(raw):
        return parse_spec(raw, source, default_name)
    (warn or _stderr)(f"themis: {path}: the older standalone spec format is deprecated; "
                      f"convert it with: themis submit --dry-run {shlex.quote(str(path))} "
                      "> NEW.json (docs/am.md, \"Spec format\")")
    try:
        return parse_spec(convert_standalone(raw), source, default_name or Path(path).stem)
    except SpecError as exc:
        raise SpecError([(old_path(f), p) for f, p in exc.problems], source) from None


def _stderr(msg: str) -> None:
    import sys

    print(msg, file=sys.stderr)
