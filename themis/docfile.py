"""Reading a spec document (cluster spec, app spec, hyper-parameter-group spec) from a
file: ``.json`` files as JSON, anything else as YAML, bounded (:mod:`themis.safeinput`).
Callers wrap :class:`DocumentError` in their own error type, which adds what kind of spec
it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from themis.safeinput import InputError, Limits, load_document, read_bytes


class DocumentError(ValueError):
    """The file cannot be read or is not valid JSON/YAML; ``problem`` says which."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def read_document(path: str | Path, limits: Limits | None = None) -> Any:
    """The parsed content of ``path`` (JSON for ``.json``, else YAML), within ``limits``
    (default :class:`~themis.safeinput.Limits`: 1 MiB, depth 32, 100,000 values with YAML
    aliases expanded, |numbers| <= 1e18; duplicate keys refused) - see
    :mod:`themis.safeinput`."""
    p = Path(path)
    try:
        data = read_bytes(p, limits or Limits())
    except OSError as exc:
        raise DocumentError(p, f"cannot read: {exc.strerror or exc}") from exc
    try:
        return load_document(data, json_only=p.suffix == ".json", limits=limits or Limits())
    except InputError as exc:
        raise DocumentError(p, str(exc)) from None
