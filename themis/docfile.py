"""Reading a spec document (cluster spec, app spec, hyper-parameter-group spec) from a
file: ``.json`` files as JSON, anything else as YAML. Callers wrap :class:`DocumentError`
in their own error type, which adds what kind of spec it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml


class DocumentError(ValueError):
    """The file cannot be read or is not valid JSON/YAML; ``problem`` says which."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def read_document(path: str | Path) -> Any:
    """The parsed content of ``path`` (JSON for ``.json``, else YAML)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise DocumentError(p, f"cannot read: {exc.strerror or exc}") from exc
    if p.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise DocumentError(p, f"not valid JSON: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DocumentError(p, f"not valid YAML: {exc}") from exc
