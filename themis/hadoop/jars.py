"""Locate the jars the package ships: the ResourceManager plugin
(``themis-rm-plugin-<version>.jar``) and the application master
(``themis-submarine-am-<version>.jar``).

An installed wheel carries both (setup.py builds them with Maven and puts them in
``themis/yarn/lib/`` and ``themis/submarine_am/lib/``). The order is: the environment
variable, then the copy inside the installed package, then a source checkout's Maven
``target/`` directory (development: an editable install has no packaged copies).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "THEMIS_RM_PLUGIN_JAR"
_PATTERN = "themis-rm-plugin-*.jar"
# the package directory ``themis/`` and, in a source checkout, the repository root above it
_PACKAGE = Path(__file__).resolve().parent.parent
_CHECKOUT = _PACKAGE.parent
BUILD_HINT = "`mvn -B -ntp -q package -DskipTests` at the repository root"


class JarNotFound(FileNotFoundError):
    """No jar at any of the places we look (the message names them and how to build it)."""


class PluginJarNotFound(JarNotFound):
    """No plugin jar at any of the places we look."""


def _newest(directory: Path, pattern: str) -> Path | None:
    if not directory.is_dir():
        return None
    jars = [
        p
        for p in directory.glob(pattern)
        if not p.name.startswith("original-")
        and not p.name.endswith(("-sources.jar", "-tests.jar", "-javadoc.jar"))
    ]
    return max(jars, key=lambda p: p.stat().st_mtime) if jars else None


def find_jar(what: str, pattern: str, env_var: str, packaged: str, module: str) -> Path:
    """``$env_var``, else the newest ``pattern`` in the installed package's ``packaged``
    folder (relative to ``themis/``), else in the checkout's ``<module>/target``."""
    env = os.environ.get(env_var)
    if env:
        p = Path(env)
        if not p.is_file():
            raise JarNotFound(f"{env_var}={env} does not name an existing file")
        return p
    places = [_PACKAGE / packaged, _CHECKOUT / module / "target"]
    for d in places:
        found = _newest(d, pattern)
        if found is not None:
            return found
    looked = " or ".join(str(d / pattern) for d in places)
    raise JarNotFound(
        f"{what} not found: no ${env_var} and no {looked}; in a source checkout build it "
        f"with {BUILD_HINT}, or install a wheel built with Maven (it ships the jar)"
    )


def find_plugin_jar() -> Path:
    """Return the plugin jar: ``$THEMIS_RM_PLUGIN_JAR``, else the copy shipped in the
    installed package (``themis/yarn/lib``), else a source checkout's ``rm-plugin/target``."""
    try:
        return find_jar("Themis RM plugin jar", _PATTERN, ENV_VAR, "yarn/lib", "rm-plugin")
    except JarNotFound as e:
        raise PluginJarNotFound(str(e)) from None
