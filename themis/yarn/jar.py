"""Locate the ResourceManager plugin jar (``themis-rm-plugin-<version>.jar``)."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "THEMIS_RM_PLUGIN_JAR"
_PATTERN = "themis-rm-plugin-*.jar"


class PluginJarNotFound(FileNotFoundError):
    """No plugin jar at any of the places we look."""


def _newest(directory: Path) -> Path | None:
    if not directory.is_dir():
        return None
    jars = [
        p
        for p in directory.glob(_PATTERN)
        if not p.name.startswith("original-")
        and not p.name.endswith(("-sources.jar", "-tests.jar"))
    ]
    return max(jars, key=lambda p: p.stat().st_mtime) if jars else None


def find_plugin_jar() -> Path:
    """Return the plugin jar: ``$THEMIS_RM_PLUGIN_JAR``, else the repository build directory
    (``rm-plugin/target``), else the copy shipped in ``themis/yarn/lib``."""
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env)
        if not p.is_file():
            raise PluginJarNotFound(f"{ENV_VAR}={env} does not name an existing file")
        return p
    here = Path(__file__).resolve().parent
    candidates = [here.parent.parent / "rm-plugin" / "target", here / "lib"]
    for d in candidates:
        found = _newest(d)
        if found is not None:
            return found
    looked = ", ".join(str(d / _PATTERN) for d in candidates)
    raise PluginJarNotFound(
        f"Themis RM plugin jar not found (looked at ${ENV_VAR}, {looked}); "
        "build it with `mvn -q package` at the repository root or set " + ENV_VAR
    )
